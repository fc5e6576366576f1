package monitoring

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
)

// The made-up histories: one sample a minute for minutes 0 to history, and one rule
// evaluation a minute. Alerts are judged from warmUp on, as by a Prometheus that has
// scraped configstamp for a while (a series present from minute 0 is not "new" to an
// offset of up to 30 minutes).
const (
	history = 120
	warmUp  = 30
)

// sel is the default selector of configstamp's series, as the chart renders it.
const sel = `job="configstamp", namespace="configstamp-system"`

// admissionBuckets are the bounds of configstamp_admission_duration_seconds's buckets
// (testdata/admission-buckets.txt, which the integration test compares with a live
// /metrics), +Inf left out.
func admissionBuckets(t *testing.T) []float64 {
	t.Helper()
	f, err := os.Open("testdata/admission-buckets.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") || l == "+Inf" {
			continue
		}
		v, err := strconv.ParseFloat(l, 64)
		if err != nil {
			t.Fatalf("admission-buckets.txt: %v", err)
		}
		out = append(out, v)
	}
	if len(out) == 0 || !slices.IsSorted(out) {
		t.Fatalf("admission-buckets.txt: want bounds in increasing order, got %v", out)
	}
	return out
}

// series writes one series in Prometheus's test language with the value f gives for each
// minute (no sample where ok is false: the series does not exist then).
func series(metric string, f func(m int) (v float64, ok bool)) string {
	var b strings.Builder
	b.WriteString(metric)
	for m := 0; m <= history; m++ {
		if v, ok := f(m); ok {
			b.WriteString(" " + strconv.FormatFloat(v, 'f', -1, 64))
		} else {
			b.WriteString(" _")
		}
	}
	return b.String() + "\n"
}

// flat is a value that never changes.
func flat(v float64) func(int) (float64, bool) {
	return func(int) (float64, bool) { return v, true }
}

// counter is a counter that grows by inc(m) at minute m, from minute from on (before it,
// the series does not exist; at its first sample it already counts inc(from)).
func counter(from int, inc func(m int) float64) func(int) (float64, bool) {
	return func(m int) (float64, bool) {
		if m < from {
			return 0, false
		}
		total := 0.0
		for i := from; i <= m; i++ {
			total += inc(i)
		}
		return total, true
	}
}

// at is an increment of n at each of the given minutes.
func at(n float64, minutes ...int) func(int) float64 {
	return func(m int) float64 {
		if slices.Contains(minutes, m) {
			return n
		}
		return 0
	}
}

// steady is an increment of n every minute.
func steady(n float64) func(int) float64 { return func(int) float64 { return n } }

// gauge is a gauge whose value f gives.
func gauge(f func(m int) float64) func(int) (float64, bool) {
	return func(m int) (float64, bool) { return f(m), true }
}

// admissions writes configstamp_admission_duration_seconds_bucket for perMinute
// admissions a minute by their duration, with the real bucket bounds.
func admissions(t *testing.T, lbls string, perMinute map[float64]float64) string {
	t.Helper()
	var b strings.Builder
	for _, le := range append(admissionBuckets(t), math.Inf(1)) {
		n := 0.0
		for d, c := range perMinute {
			if d <= le {
				n += c
			}
		}
		leStr := strconv.FormatFloat(le, 'f', -1, 64)
		if math.IsInf(le, 1) {
			leStr = "+Inf"
		}
		b.WriteString(series(fmt.Sprintf(`configstamp_admission_duration_seconds_bucket{%s, le=%q}`, lbls, leStr), counter(0, steady(n))))
	}
	return b.String()
}

// alertCase is a history of series, the chart's values it is judged with, and the alerts
// that must fire at its end, must not fire at its end, and must never fire (from warmUp
// on).
type alertCase struct {
	name                string
	values              []string
	series              string
	fire, notEnd, quiet []string
	// labels, when set, must be among every firing alert's labels.
	labels map[string]string
}

// evalAlerts judges each case with Prometheus's engine, the rules' for: durations
// included.
func evalAlerts(t *testing.T, cases []alertCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rule, _ := renderMonitoring(t, tc.values...)
			rules := map[string]rulefmt.Rule{}
			for _, g := range ruleGroups(t, rule).Groups {
				for _, r := range g.Rules {
					rules[r.Alert] = r
				}
			}
			q := load(t, tc.series)
			for _, a := range tc.fire {
				firing := firingAt(t, rules, q, a)
				if len(firing[history]) == 0 {
					t.Errorf("%s does not fire at the end", a)
				}
				for _, lset := range firing[history] {
					checkAlertLabels(t, rules[a], lset, tc.labels)
				}
			}
			for _, a := range tc.notEnd {
				if firing := firingAt(t, rules, q, a); len(firing[history]) != 0 {
					t.Errorf("%s fires at the end: %v", a, firing[history])
				}
			}
			for _, a := range tc.quiet {
				firing := firingAt(t, rules, q, a)
				for m := warmUp; m <= history; m++ {
					if len(firing[m]) != 0 {
						t.Errorf("%s fires at minute %d: %v", a, m, firing[m])
						break
					}
				}
			}
		})
	}
}

// checkAlertLabels fails unless the firing alert's labels hold want and every label its
// annotations show.
func checkAlertLabels(t *testing.T, r rulefmt.Rule, lset labels.Labels, want map[string]string) {
	t.Helper()
	for l, v := range want {
		if got := lset.Get(l); got != v {
			t.Errorf("%s fires with %s=%q, want %q: %v", r.Alert, l, got, v, lset)
		}
	}
	for _, text := range r.Annotations {
		for _, m := range labelRef.FindAllStringSubmatch(text, -1) {
			if lset.Get(m[1]) == "" {
				t.Errorf("%s: its annotations show $labels.%s, which it fires without: %v", r.Alert, m[1], lset)
			}
		}
	}
}

// firingAt evaluates an alert's expression every minute of the history, as Prometheus's
// rule manager does, and returns by minute the label sets firing: those the expression
// returned at every evaluation from the rule's for: before through that minute.
func firingAt(t *testing.T, rules map[string]rulefmt.Rule, q storage.Queryable, alert string) map[int][]labels.Labels {
	t.Helper()
	r, ok := rules[alert]
	if !ok {
		t.Fatalf("no alert %s", alert)
	}
	engine := promql.NewEngine(promql.EngineOpts{
		MaxSamples: 1e7, Timeout: time.Minute, LookbackDelta: 5 * time.Minute, Parser: promParser,
		NoStepSubqueryIntervalFn: func(int64) int64 { return time.Minute.Milliseconds() },
	})
	defer engine.Close()
	start := time.Unix(0, 0)
	rq, err := engine.NewRangeQuery(context.Background(), q, nil, r.Expr, start, start.Add(history*time.Minute), time.Minute)
	if err != nil {
		t.Fatalf("%s: %v", alert, err)
	}
	defer rq.Close()
	res := rq.Exec(context.Background())
	if res.Err != nil {
		t.Fatalf("%s: %v", alert, res.Err)
	}
	matrix, err := res.Matrix()
	if err != nil {
		t.Fatalf("%s: %v", alert, err)
	}
	hold := int(time.Duration(r.For) / time.Minute)
	out := map[int][]labels.Labels{}
	for _, s := range matrix {
		active := map[int]bool{}
		for _, p := range s.Floats {
			active[int(p.T/time.Minute.Milliseconds())] = true
		}
		lset := labels.NewBuilder(s.Metric).Del(labels.MetricName).Labels()
		for m := 0; m <= history; m++ {
			firing := m-hold >= 0
			for k := m - hold; firing && k <= m; k++ {
				firing = active[k]
			}
			if firing {
				out[m] = append(out[m], lset)
			}
		}
	}
	return out
}

// without returns the alerts but those named.
func without(names ...string) []string {
	return slices.DeleteFunc(slices.Clone(wantAlerts), func(a string) bool { return slices.Contains(names, a) })
}

// TestAlerts: every alert fires when configstamp is in the trouble it is about and is
// quiet while configstamp is healthy, including what looks like trouble and is not: a
// ConfigMap rewritten without pause (a leader election's), a deep work queue that drains
// after a leader change on a large cluster, one burst of errors, fail-opens long past.
func TestAlerts(t *testing.T) {
	withCluster := sel + `, cluster="eu-1"`
	healthy := "" +
		series(`configstamp_build_info{`+sel+`, pod="a", version="v1"}`, flat(1)) +
		series(`configstamp_bypasses_detected_total{`+sel+`, pod="a"}`, flat(0)) +
		// Fail-opens of configstamp's entry before the history; another webhook's now.
		series(`apiserver_admission_webhook_fail_open_count{name="deployments.configstamp.io", type="admit"}`, flat(2)) +
		series(`apiserver_admission_webhook_fail_open_count{name="policy.other.example.com", type="admit"}`, counter(0, steady(1))) +
		series(`configstamp_admission_requests_total{`+sel+`, pod="a", result="stamped"}`, counter(0, steady(100))) +
		series(`configstamp_admission_requests_total{`+sel+`, pod="a", result="read_error"}`, counter(0, steady(1))) +
		series(`configstamp_checks_total{`+sel+`, pod="a", result="current"}`, counter(0, steady(10))) +
		// One burst of errors (an API server restart), retried successfully.
		series(`configstamp_checks_total{`+sel+`, pod="a", result="error"}`, counter(0, at(40, 60))) +
		admissions(t, sel+`, pod="a", result="stamped"`, map[float64]float64{0.02: 1000, 1: 5}) +
		series(`leader_election_master_status{`+sel+`, pod="a", name="configstamp-watcher"}`, flat(1)) +
		series(`leader_election_master_status{`+sel+`, pod="b", name="configstamp-watcher"}`, flat(0)) +
		series(`leader_election_master_status{namespace="other", job="other", pod="c", name="other-operator"}`, flat(0)) +
		// A leader election ConfigMap rewritten every 2 s: always one burst pending,
		// handed on at debounceMax (30s) each time.
		series(`configstamp_debounce_pending{`+sel+`, pod="a", source="configmap"}`, flat(1)) +
		series(`configstamp_debounce_oldest_seconds{`+sel+`, pod="a", source="configmap"}`, gauge(func(m int) float64 { return float64(m * 7 % 30) })) +
		series(`configstamp_debounce_oldest_seconds{`+sel+`, pod="a", source="secret"}`, flat(0)) +
		// A leader change at minute 40 on a cluster of 40,000 Deployments: every one is
		// checked again at the client rate limit, 1,200 a minute, low priority; the
		// queue is deep for 33 minutes while it drains.
		series(`workqueue_depth{`+sel+`, pod="a", controller="deployment", name="deployment", priority="-100"}`, gauge(func(m int) float64 {
			return max(0, min(40000, 40000-1200*float64(m-40)))
		})) +
		series(`workqueue_depth{`+sel+`, pod="a", controller="deployment", name="deployment", priority="0"}`, gauge(func(m int) float64 { return float64(m % 2) })) +
		series(`workqueue_work_duration_seconds_count{`+sel+`, pod="a", controller="deployment", name="deployment"}`, counter(0, func(m int) float64 {
			if m >= 40 && m < 74 {
				return 1200
			}
			return 20
		})) +
		series(`workqueue_longest_running_processor_seconds{`+sel+`, pod="a", controller="deployment", name="deployment"}`, gauge(func(m int) float64 { return float64(m%3) * 0.8 })) +
		series(`workqueue_depth{`+sel+`, pod="a", controller="configmap", name="configmap", priority="0"}`, flat(0)) +
		series(`workqueue_work_duration_seconds_count{`+sel+`, pod="a", controller="configmap", name="configmap"}`, counter(0, steady(30))) +
		series(`workqueue_longest_running_processor_seconds{`+sel+`, pod="a", controller="configmap", name="configmap"}`, flat(0)) +
		series(`workqueue_depth{namespace="other", job="other", name="other"}`, flat(7)) +
		// The re-check queues what moved each pass, and finds nothing its events missed.
		series(`configstamp_recheck_queued_total{`+sel+`, pod="a", kind="Deployment"}`, counter(0, at(3, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110))) +
		series(`configstamp_recheck_found_total{`+sel+`, pod="a", kind="Deployment"}`, flat(0)) +
		series(`configstamp_hash_key_mismatches_total{`+sel+`, pod="a"}`, flat(0)) +
		series(`configstamp_read_timeouts_total{`+sel+`, pod="a"}`, flat(0)) +
		// A change that halted in waves before the history (resumed or fixed since).
		series(`configstamp_waves_halts_total{`+sel+`, pod="a"}`, flat(1))

	failing := "" +
		series(`configstamp_build_info{`+withCluster+`, pod="a", version="v1"}`, flat(1)) +
		series(`configstamp_bypasses_detected_total{`+withCluster+`, pod="a"}`, counter(0, at(1, 110, 115))) +
		// The API server's counter appears at its first fail-opens, already at 3.
		series(`apiserver_admission_webhook_fail_open_count{cluster="eu-1", name="deployments.configstamp.io", type="admit"}`, counter(117, at(3, 117))) +
		series(`configstamp_admission_requests_total{`+withCluster+`, pod="a", result="stamped"}`, counter(0, steady(10))) +
		series(`configstamp_admission_requests_total{`+withCluster+`, pod="a", result="read_error"}`, counter(0, steady(5))) +
		// A check failing every 20 minutes (backoff, or each time its workload changes).
		series(`configstamp_checks_total{`+withCluster+`, pod="a", result="error"}`, counter(0, at(1, 10, 30, 50, 70, 90, 110))) +
		// 3% of the admissions time out reading config, at 60% of the 5 s deadline.
		admissions(t, withCluster+`, pod="a", result="stamped"`, map[float64]float64{0.02: 97, 3: 3}) +
		series(`leader_election_master_status{`+withCluster+`, pod="a", name="configstamp-watcher"}`, flat(0)) +
		series(`leader_election_master_status{`+withCluster+`, pod="b", name="configstamp-watcher"}`, flat(0)) +
		series(`configstamp_debounce_pending{`+withCluster+`, pod="a", source="configmap"}`, flat(1)) +
		// A burst that is never handed on, from minute 60.
		series(`configstamp_debounce_oldest_seconds{`+withCluster+`, pod="a", source="configmap"}`, gauge(func(m int) float64 { return float64(max(0, m-60) * 60) })) +
		// A check stuck since minute 60, and items waiting behind it.
		series(`workqueue_depth{`+withCluster+`, pod="a", controller="deployment", name="deployment", priority="0"}`, flat(3)) +
		series(`workqueue_work_duration_seconds_count{`+withCluster+`, pod="a", controller="deployment", name="deployment"}`, counter(0, func(m int) float64 {
			if m < 60 {
				return 5
			}
			return 0
		})) +
		series(`workqueue_longest_running_processor_seconds{`+withCluster+`, pod="a", controller="deployment", name="deployment"}`, gauge(func(m int) float64 { return float64(max(0, m-60) * 60) })) +
		// A pass at minute 100 rolled a workload no event had.
		series(`configstamp_recheck_found_total{`+withCluster+`, pod="a", kind="Deployment"}`, counter(0, at(1, 100))) +
		// A replica that cannot read the key since minute 90: workloads held back.
		series(`configstamp_hash_key_mismatches_total{`+withCluster+`, pod="a"}`, counter(0, at(2, 95, 105, 115))) +
		// A tenant's Deployments naming hundreds of missing ConfigMaps, left alone from
		// minute 100 after their reads timed out ten checks in a row.
		series(`configstamp_read_timeouts_total{`+withCluster+`, pod="a"}`, counter(0, at(3, 100, 110))) +
		// A change rolling in waves halted at minute 100.
		series(`configstamp_waves_halts_total{`+withCluster+`, pod="a"}`, counter(0, at(1, 100)))

	evalAlerts(t, []alertCase{{
		name:   "healthy",
		series: healthy,
		quiet:  wantAlerts,
	}, {
		name:   "failing, in a cluster",
		series: failing,
		fire:   without("ConfigstampMetricsAbsent"),
		quiet:  []string{"ConfigstampMetricsAbsent"},
		labels: map[string]string{"cluster": "eu-1"},
	}, {
		name:   "no configstamp series at all",
		series: series(`up{job="other"}`, flat(1)) + series(`leader_election_master_status{namespace="other", job="other", name="configstamp-watcher"}`, flat(0)),
		fire:   []string{"ConfigstampMetricsAbsent"},
		quiet:  without("ConfigstampMetricsAbsent"),
	}})
}

// TestFailOpenNewSeries: the API server creates its fail-open counter at a webhook's
// first fail-open, already counting it; with no sample before, increase() alone sees
// nothing.
func TestFailOpenNewSeries(t *testing.T) {
	const name = `apiserver_admission_webhook_fail_open_count{name="pods.configstamp.io", type="admit"}`
	evalAlerts(t, []alertCase{{
		name:   "appears at the last scrape",
		series: series(name, counter(history, at(1, history))),
		fire:   []string{"ConfigstampWebhookFailOpen"},
	}, {
		name:   "appears, then counts more",
		series: series(name, counter(112, at(2, 112, 118))),
		fire:   []string{"ConfigstampWebhookFailOpen"},
	}, {
		name:   "appeared 15 minutes ago",
		series: series(name, counter(history-15, at(4, history-15))),
		notEnd: []string{"ConfigstampWebhookFailOpen"},
	}})
}

// TestCheckErrorsSparse: a check that fails now and then, minutes apart (its backoff,
// or each change of its workload), keeps the alert firing; one burst of errors does not
// fire it.
func TestCheckErrorsSparse(t *testing.T) {
	const name = `configstamp_checks_total{` + sel + `, pod="a", result="error"}`
	const alert = "ConfigstampWatcherCheckErrors"
	evalAlerts(t, []alertCase{{
		name:   "every 25 minutes",
		series: series(name, counter(0, at(1, 5, 30, 55, 80, 105))),
		fire:   []string{alert},
	}, {
		name:   "a series that appears at its first error, then every 25 minutes",
		series: series(name, counter(50, at(1, 50, 75, 100))),
		fire:   []string{alert},
	}, {
		name:   "one burst",
		series: series(name, counter(0, at(200, 50))),
		quiet:  []string{alert},
	}, {
		name:   "one burst in a new series",
		series: series(name, counter(50, at(200, 50))),
		quiet:  []string{alert},
	}, {
		name:   "two bursts 40 minutes apart",
		series: series(name, counter(0, at(3, 40, 80))),
		quiet:  []string{alert},
	}})
}

// TestDebounceNotDraining: the age of the oldest burst is bounded by debounceMax while
// bursts are handed on, however often a ConfigMap changes; the alert's threshold follows
// debounceMax (extraArgs' --debounce-max winning, as it does in configstamp).
func TestDebounceNotDraining(t *testing.T) {
	const name = `configstamp_debounce_oldest_seconds{` + sel + `, pod="a", source="configmap"}`
	const alert = "ConfigstampDebounceNotDraining"
	churn := func(upTo int) func(int) (float64, bool) {
		return gauge(func(m int) float64 { return float64(m * 7 % upTo) })
	}
	stuckFrom60 := gauge(func(m int) float64 { return float64(max(0, m-60) * 60) })
	evalAlerts(t, []alertCase{{
		name:   "constant churn, debounceMax 30s",
		series: series(name, churn(30)),
		quiet:  []string{alert},
	}, {
		name:   "slow hand-off, a minute past debounceMax",
		series: series(name, flat(90)),
		quiet:  []string{alert},
	}, {
		name:   "stuck, debounceMax 30s",
		series: series(name, stuckFrom60),
		fire:   []string{alert},
	}, {
		name:   "constant churn, debounceMax 5m",
		values: []string{"--set", "debounceMax=5m"},
		series: series(name, churn(300)),
		quiet:  []string{alert},
	}, {
		name:   "constant churn, --debounce-max=5m in extraArgs",
		values: []string{"--set", "extraArgs={--debounce-max=5m}"},
		series: series(name, churn(300)),
		quiet:  []string{alert},
	}, {
		name:   "stuck, debounceMax 5m",
		values: []string{"--set", "debounceMax=5m"},
		series: series(name, stuckFrom60),
		fire:   []string{alert},
	}})
}

// TestDebounceThreshold: ConfigstampDebounceNotDraining fires past twice the debounce-max
// configstamp runs with, plus a minute: 0 is configstamp's default (30s), less than
// debounce is debounce, extraArgs win.
func TestDebounceThreshold(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   float64
	}{
		{nil, 2*30 + 60},
		{[]string{"--set", "debounceMax=1m30s"}, 2*90 + 60},
		{[]string{"--set", "debounceMax=0"}, 2*30 + 60},
		{[]string{"--set", "debounceMax=500ms", "--set", "debounce=2s"}, 2*2 + 60},
		{[]string{"--set", "debounceMax=2h"}, 2*7200 + 60},
		{[]string{"--set", "extraArgs={--debounce-max=5m}"}, 2*300 + 60},
		{[]string{"--set", "extraArgs={-debounce-max=1m,--debounce=3m}"}, 2*180 + 60},
		{[]string{"--set", "extraArgs={--debounce-max,4m}"}, 2*240 + 60},
	} {
		rules := renderRules(t, tc.values...)
		if got := threshold(t, rules["ConfigstampDebounceNotDraining"].Expr); got != tc.want {
			t.Errorf("%v: threshold %v, want %v", tc.values, got, tc.want)
		}
	}
}

// TestQueueNotDraining: a deep queue that is processed does not fire; a stuck check, or
// items waiting while none finishes, do.
func TestQueueNotDraining(t *testing.T) {
	const alert = "ConfigstampWatcherQueueNotDraining"
	lbls := sel + `, pod="a", controller="deployment", name="deployment"`
	evalAlerts(t, []alertCase{{
		name: "80,000 workloads after a leader change: deep for over an hour, draining",
		series: series(`workqueue_depth{`+lbls+`, priority="-100"}`, gauge(func(m int) float64 {
			return max(0, min(80000, 80000-1200*float64(m-30)))
		})) +
			series(`workqueue_work_duration_seconds_count{`+lbls+`}`, counter(0, steady(1200))) +
			series(`workqueue_longest_running_processor_seconds{`+lbls+`}`, gauge(func(m int) float64 { return float64(m % 4) })),
		quiet: []string{alert},
	}, {
		name: "a check hung since minute 90",
		series: series(`workqueue_depth{`+lbls+`, priority="0"}`, flat(0)) +
			series(`workqueue_work_duration_seconds_count{`+lbls+`}`, counter(0, steady(3))) +
			series(`workqueue_longest_running_processor_seconds{`+lbls+`}`, gauge(func(m int) float64 { return float64(max(0, m-90) * 60) })),
		fire: []string{alert},
	}, {
		name: "items waiting, none processed since minute 60",
		series: series(`workqueue_depth{`+lbls+`, priority="0"}`, gauge(func(m int) float64 {
			if m >= 60 {
				return 2
			}
			return float64(m % 2 * 2)
		})) +
			series(`workqueue_work_duration_seconds_count{`+lbls+`}`, counter(0, func(m int) float64 {
				if m >= 60 {
					return 0
				}
				return 1
			})) +
			series(`workqueue_longest_running_processor_seconds{`+lbls+`}`, flat(0)),
		fire: []string{alert},
	}})
}

// TestNoLeaderLease: ConfigstampNoLeader selects the Lease configstamp runs with: the
// default, or the last --leader-election-id of extraArgs in any form Go's flag package
// takes.
func TestNoLeaderLease(t *testing.T) {
	for _, tc := range []struct {
		args string
		want string
	}{
		{"", "configstamp-watcher"},
		{"{--leader-election-id=cs}", "cs"},
		{"{-leader-election-id=cs}", "cs"},
		{"{--concurrency=8,-leader-election-id=cs}", "cs"},
		{"{--leader-election-id,cs}", "cs"},
		{"{-leader-election-id,cs,--concurrency,8}", "cs"},
		{"{--leader-election-id=a,--leader-election-id=b}", "b"},
		{"{--leader-election-namespace=x,--leader-election-id-suffix=y}", "configstamp-watcher"},
	} {
		var values []string
		if tc.args != "" {
			values = []string{"--set", "extraArgs=" + tc.args}
		}
		r := renderRules(t, values...)["ConfigstampNoLeader"]
		e, err := promParser.ParseExpr(r.Expr)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range parser.ExtractSelectors(e) {
			if metricName(s) != "leader_election_master_status" {
				continue
			}
			if m := matcher(s, "name"); m == nil || m.Type != labels.MatchEqual || m.Value != tc.want {
				t.Errorf("extraArgs %s: %s selects name %v, want %q", tc.args, metricName(s), m, tc.want)
			}
		}
		if !strings.Contains(r.Annotations["description"], "Lease "+tc.want+" ") {
			t.Errorf("extraArgs %s: the description does not name the Lease %s: %s", tc.args, tc.want, r.Annotations["description"])
		}
	}

	// The alert on a Lease named in extraArgs: it fires when no replica leads, and is
	// quiet when one does (never because the name differs).
	const lease = `leader_election_master_status{` + sel + `, name="cs-lease", pod="%s"}`
	own := []string{"--set", "extraArgs={--leader-election-id=cs-lease}"}
	evalAlerts(t, []alertCase{{
		name:   "a leader",
		values: own,
		series: series(fmt.Sprintf(lease, "a"), flat(1)) + series(fmt.Sprintf(lease, "b"), flat(0)) +
			series(`configstamp_build_info{`+sel+`, pod="a", version="v1"}`, flat(1)),
		quiet: []string{"ConfigstampNoLeader", "ConfigstampMetricsAbsent"},
	}, {
		name:   "no leader",
		values: own,
		series: series(fmt.Sprintf(lease, "a"), flat(0)) + series(fmt.Sprintf(lease, "b"), flat(0)) +
			series(`configstamp_build_info{`+sel+`, pod="a", version="v1"}`, flat(1)),
		fire:  []string{"ConfigstampNoLeader"},
		quiet: []string{"ConfigstampMetricsAbsent"},
	}, {
		name:   "not scraped",
		values: own,
		series: series(`up{job="other"}`, flat(1)),
		fire:   []string{"ConfigstampMetricsAbsent"},
		quiet:  []string{"ConfigstampNoLeader"},
	}, {
		// roles.split: the webhook's pods elect no leader and report no Lease; every
		// watcher pod gone (crash-looping, scaled to 0) leaves no series of the Lease.
		name:   "the webhook's pods scraped, no watcher's",
		values: own,
		series: series(`configstamp_build_info{`+sel+`, pod="w1", version="v1"}`, flat(1)) +
			series(`configstamp_build_info{`+sel+`, pod="w2", version="v1"}`, flat(1)) +
			series(`leader_election_master_status{namespace="other", job="other", pod="c", name="cs-lease"}`, flat(1)),
		fire:  []string{"ConfigstampNoLeader"},
		quiet: []string{"ConfigstampMetricsAbsent"},
	}, {
		name:   "the webhook's pods and a leading watcher scraped",
		values: own,
		series: series(`configstamp_build_info{`+sel+`, pod="w1", version="v1"}`, flat(1)) +
			series(`configstamp_build_info{`+sel+`, pod="a", version="v1"}`, flat(1)) +
			series(fmt.Sprintf(lease, "a"), flat(1)),
		quiet: []string{"ConfigstampNoLeader", "ConfigstampMetricsAbsent"},
	}})
}

// TestAdmissionSlow: the threshold is the largest bucket bound at or below half the
// timeout, for every timeout the API server allows (1-30 s), and always below the
// largest finite bound (histogram_quantile never estimates past it); at timeouts 5, 10
// and 30, admissions that wait for their reads' timeout (60% of the deadline) fire the
// alert, and admissions at 40% of it do not.
func TestAdmissionSlow(t *testing.T) {
	buckets := admissionBuckets(t)
	for timeout := 1; timeout <= 30; timeout++ {
		want := 0.0
		for _, b := range buckets {
			if b <= float64(timeout)/2 {
				want = b
			}
		}
		got := threshold(t, renderRules(t, "--set", fmt.Sprintf("webhook.timeoutSeconds=%d", timeout))["ConfigstampAdmissionSlow"].Expr)
		if got != want || got >= buckets[len(buckets)-1] {
			t.Errorf("timeout %ds: threshold %v, want %v (below the largest bucket bound %v)", timeout, got, want, buckets[len(buckets)-1])
		}
	}
	var cases []alertCase
	for _, timeout := range []float64{5, 10, 30} {
		values := []string{"--set", fmt.Sprintf("webhook.timeoutSeconds=%v", timeout)}
		lbls := sel + `, pod="a", result="stamped"`
		cases = append(cases, alertCase{
			name:   fmt.Sprintf("timeout %vs, 2%% of admissions at the read timeout", timeout),
			values: values,
			series: admissions(t, lbls, map[float64]float64{0.01: 980, 0.6 * timeout: 20}),
			fire:   []string{"ConfigstampAdmissionSlow"},
		}, alertCase{
			name:   fmt.Sprintf("timeout %vs, 1.5%% of admissions at 40%% of it", timeout),
			values: values,
			series: admissions(t, lbls, map[float64]float64{0.01: 985, 0.4 * timeout: 15}),
			quiet:  []string{"ConfigstampAdmissionSlow"},
		})
	}
	evalAlerts(t, cases)
}

// renderRules renders the chart with the rule enabled and returns its alerts by name.
func renderRules(t *testing.T, values ...string) map[string]rulefmt.Rule {
	t.Helper()
	rule, _ := renderMonitoring(t, values...)
	out := map[string]rulefmt.Rule{}
	for _, g := range ruleGroups(t, rule).Groups {
		for _, r := range g.Rules {
			out[r.Alert] = r
		}
	}
	return out
}

// threshold returns the number an alert's expression compares with: expr > number.
func threshold(t *testing.T, expr string) float64 {
	t.Helper()
	e, err := promParser.ParseExpr(expr)
	if err != nil {
		t.Fatal(err)
	}
	b, ok := e.(*parser.BinaryExpr)
	if !ok || b.Op != parser.GTR {
		t.Fatalf("%q is not a comparison: expr > threshold", expr)
	}
	n, ok := b.RHS.(*parser.NumberLiteral)
	if !ok {
		t.Fatalf("%q: %v is not a number", expr, b.RHS)
	}
	return n.Val
}
