package integration

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

// monitoringMetrics lists every series the chart's PrometheusRule and Grafana dashboard
// select (metric names, the label values they filter on, the labels they group by and
// show); test/monitoring derives it from them with Prometheus's own parser and fails when
// it is out of date. admissionBuckets lists the bucket bounds of configstamp's admission
// histogram that test/monitoring judges ConfigstampAdmissionSlow with.
var (
	monitoringMetrics = filepath.Join(cluster.RepoRoot(), "test", "monitoring", "testdata", "metric-names.txt")
	admissionBuckets  = filepath.Join(cluster.RepoRoot(), "test", "monitoring", "testdata", "admission-buckets.txt")
)

// TestMonitoringMetricsExported proves that the alerts and the dashboard select only
// series that exist, with the label values they filter on (a result, the leader
// election's Lease name) and the labels they group by or show (a source kind):
// configstamp's (one replica with leader election and the default Lease name, as the
// chart's rule is rendered, that admitted, saw a ConfigMap change and nudged, so every
// lazily created series is there) and the API server's (its fail-open counter appears
// only after a webhook failed open, so one is made to: a registration whose entry is
// named like configstamp's points at a closed port). It also finds exactly the bucket
// bounds of testdata/admission-buckets.txt on the admission histogram.
func TestMonitoringMetricsExported(t *testing.T) {
	want := readLines(t, monitoringMetrics)
	if len(want) == 0 {
		t.Fatalf("%s lists no series", monitoringMetrics)
	}
	var wantLE []float64
	for _, l := range readLines(t, admissionBuckets) {
		le, err := strconv.ParseFloat(l, 64)
		if err != nil {
			t.Fatalf("%s: %v", admissionBuckets, err)
		}
		wantLE = append(wantLE, le)
	}

	metricsAddr := freeAddr(t)
	leaseNS := env.NewNamespace(t, false)
	env.Start(t, framework.Options{Args: []string{"--metrics-bind-address", metricsAddr,
		"--leader-elect", "--leader-election-namespace", leaseNS, "--debounce", "100ms"}})

	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "m", map[string]string{"k": "1"}))
	createDeployment(t, ns, "app", podWithVolumes("m"))
	setData(t, ns, "m", "k", "2")
	waitStamp(t, ns, "app", docHash(t, ns, docSource{name: "m"}))
	failOpen(t, ns)

	api := apiServerMetrics(t)
	framework.Eventually(t, 20*time.Second, "every series the alerts and the dashboard select", func() error {
		own := scrapeSeries(t, func() (io.ReadCloser, error) {
			resp, err := http.Get("http://" + metricsAddr + "/metrics")
			if err != nil {
				return nil, err
			}
			return resp.Body, nil
		})
		apiserver := scrapeSeries(t, api)
		if os.Getenv("CONFIGSTAMP_TEST_DUMP_METRICS") != "" {
			t.Logf("configstamp:\n%s\napiserver:\n%s", dumpSeries(own), dumpSeries(apiserver))
		}
		var missing []string
		for _, line := range want {
			sel, err := parseSelector(line)
			if err != nil {
				t.Fatalf("%s: %v", monitoringMetrics, err)
			}
			from := own
			if strings.HasPrefix(sel.name, "apiserver_") {
				from = apiserver
			}
			if !slices.ContainsFunc(from, sel.matches) {
				missing = append(missing, line)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("not exported: %s", strings.Join(missing, ", "))
		}
		var gotLE []float64
		for _, s := range own {
			if s.name == "configstamp_admission_duration_seconds_bucket" && s.labels["result"] == "stamped" {
				le, err := strconv.ParseFloat(s.labels["le"], 64)
				if err != nil {
					return fmt.Errorf("le %q: %v", s.labels["le"], err)
				}
				gotLE = append(gotLE, le)
			}
		}
		slices.Sort(gotLE)
		if !slices.Equal(gotLE, wantLE) {
			return fmt.Errorf("configstamp_admission_duration_seconds buckets %v, %s lists %v", gotLE, admissionBuckets, wantLE)
		}
		return nil
	})
}

// readLines returns a file's lines but blank ones and # comments.
func readLines(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(raw), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// selector is a line of metric-names.txt: a metric name and label matchers as PromQL
// writes them (=, !=, =~, !~, values double-quoted).
type selector struct {
	name     string
	matchers []labelMatcher
}

type labelMatcher struct {
	label, op, value string
	re               *regexp.Regexp
}

var matcherRE = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")\s*(?:,|$)`)

func parseSelector(line string) (selector, error) {
	name, rest, hasLabels := strings.Cut(line, "{")
	sel := selector{name: strings.TrimSpace(name)}
	if !hasLabels {
		return sel, nil
	}
	rest, ok := strings.CutSuffix(strings.TrimSpace(rest), "}")
	if !ok {
		return sel, fmt.Errorf("%q: no closing }", line)
	}
	for rest = strings.TrimSpace(rest); rest != ""; rest = strings.TrimSpace(rest) {
		m := matcherRE.FindStringSubmatch(rest)
		if m == nil {
			return sel, fmt.Errorf("%q: cannot parse the matchers at %q", line, rest)
		}
		value, err := strconv.Unquote(m[3])
		if err != nil {
			return sel, fmt.Errorf("%q: %v", line, err)
		}
		lm := labelMatcher{label: m[1], op: m[2], value: value}
		if strings.Contains(lm.op, "~") {
			if lm.re, err = regexp.Compile("^(?:" + value + ")$"); err != nil {
				return sel, fmt.Errorf("%q: %v", line, err)
			}
		}
		sel.matchers = append(sel.matchers, lm)
		rest = rest[len(m[0]):]
	}
	return sel, nil
}

// matches reports whether a series is selected (a label absent is the empty value).
func (sel selector) matches(s series) bool {
	if s.name != sel.name {
		return false
	}
	for _, m := range sel.matchers {
		v := s.labels[m.label]
		var ok bool
		switch m.op {
		case "=":
			ok = v == m.value
		case "!=":
			ok = v != m.value
		case "=~":
			ok = m.re.MatchString(v)
		case "!~":
			ok = !m.re.MatchString(v)
		}
		if !ok {
			return false
		}
	}
	return true
}

// failOpen registers a webhook entry named like configstamp's (".configstamp.io") that
// points at a closed port, with failurePolicy Ignore and an object selector only one
// ConfigMap matches, and creates that ConfigMap (dry run) until the API server counts a
// fail-open for it.
func failOpen(t *testing.T, ns string) {
	t.Helper()
	closed := freePort(t)
	sel := map[string]string{"configstamp-test/fail-open": fmt.Sprintf("%04x", rand.IntN(0xffff))}
	none := admissionregistrationv1.SideEffectClassNone
	ignore := admissionregistrationv1.Ignore
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "fail-open-" + ns},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "fail-open.test.configstamp.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(fmt.Sprintf("https://127.0.0.1:%d/mutate", closed))},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: sel},
			SideEffects:             &none,
			FailurePolicy:           &ignore,
			TimeoutSeconds:          ptr.To[int32](2),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	create(t, mwc)
	t.Cleanup(func() { _ = k8s.Delete(bg, mwc) })
	api := apiServerMetrics(t)
	framework.Eventually(t, 20*time.Second, "a fail-open counted by the API server", func() error {
		cm := configMap(ns, "fail-open", nil)
		cm.Labels = sel
		if err := k8s.Create(bg, cm, client.DryRunAll); err != nil {
			return err
		}
		if !slices.ContainsFunc(scrapeSeries(t, api), func(s series) bool { return s.name == "apiserver_admission_webhook_fail_open_count" }) {
			return fmt.Errorf("apiserver_admission_webhook_fail_open_count not exported yet")
		}
		return nil
	})
}

// apiServerMetrics returns a reader of the test API server's /metrics, as admin.
func apiServerMetrics(t *testing.T) func() (io.ReadCloser, error) {
	t.Helper()
	hc, err := rest.HTTPClientFor(env.Cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	return func() (io.ReadCloser, error) {
		resp, err := hc.Get(env.Cluster.URL + "/metrics")
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
		}
		return resp.Body, nil
	}
}

// series is one sample of a Prometheus text exposition: its name (a histogram's
// _bucket, _sum and _count, as PromQL names them) and labels.
type series struct {
	name   string
	labels map[string]string
}

// scrapeSeries reads a Prometheus text exposition.
func scrapeSeries(t *testing.T, get func() (io.ReadCloser, error)) []series {
	t.Helper()
	body, err := get()
	if err != nil {
		t.Fatalf("scrape metrics: %v", err)
	}
	defer body.Close()
	var out []series
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			t.Fatalf("scrape metrics: %v", err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("scrape metrics: %v", err)
	}
	return out
}

// parseSample parses the name and labels of one exposition line,
// name{label="value",...} value: label values escape \\, \" and \n.
func parseSample(line string) (series, error) {
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return series{}, fmt.Errorf("line %q: no name", line)
	}
	s := series{name: line[:i], labels: map[string]string{}}
	rest := line[i:]
	if !strings.HasPrefix(rest, "{") {
		return s, nil
	}
	rest = rest[1:]
	for {
		rest = strings.TrimLeft(rest, ", ")
		if strings.HasPrefix(rest, "}") {
			return s, nil
		}
		name, after, ok := strings.Cut(rest, "=")
		if !ok || !strings.HasPrefix(after, `"`) {
			return s, fmt.Errorf("line %q: bad labels", line)
		}
		var value strings.Builder
		j := 1
		for ; j < len(after) && after[j] != '"'; j++ {
			if after[j] == '\\' && j+1 < len(after) {
				j++
				switch after[j] {
				case 'n':
					value.WriteByte('\n')
				default:
					value.WriteByte(after[j])
				}
				continue
			}
			value.WriteByte(after[j])
		}
		if j >= len(after) {
			return s, fmt.Errorf("line %q: unterminated label value", line)
		}
		s.labels[strings.TrimSpace(name)] = value.String()
		rest = after[j+1:]
	}
}

// dumpSeries writes series one a line, sorted.
func dumpSeries(all []series) string {
	var lines []string
	for _, s := range all {
		var ls []string
		for _, l := range slices.Sorted(maps.Keys(s.labels)) {
			ls = append(ls, fmt.Sprintf("%s=%q", l, s.labels[l]))
		}
		lines = append(lines, s.name+"{"+strings.Join(ls, ",")+"}")
	}
	slices.Sort(lines)
	return strings.Join(slices.Compact(lines), "\n")
}
