// Package monitoring checks the chart's optional PrometheusRule and Grafana dashboard with
// Prometheus's own code: the rules parse and validate as Prometheus loads them (rulefmt),
// every dashboard query parses, every alert fires on the series it is about and stays
// quiet on healthy ones (the PromQL engine over a test storage, with the rules' for:
// durations), and the series they select are exactly those in testdata/metric-names.txt,
// which the integration tests find on a live configstamp's and API server's /metrics.
//
// It is a module of its own, so that Prometheus's dependencies stay out of configstamp's
// go.mod. It renders the chart with the helm that hack/tools.sh builds.
package monitoring

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
	"go.yaml.in/yaml/v3"
)

const (
	repoRoot  = "../.."
	releaseNS = "configstamp-system"
	namesFile = "testdata/metric-names.txt"
)

var (
	chart = filepath.Join(repoRoot, "deploy", "helm", "configstamp")
	// promParser parses as a Prometheus with default settings does (no experimental
	// functions).
	promParser = parser.NewParser(parser.Options{})
)

// helm is the helm binary: $CONFIGSTAMP_BIN_DIR/helm, or the one hack/tools.sh builds.
func helm(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("CONFIGSTAMP_BIN_DIR")
	if dir == "" {
		out, err := exec.Command("bash", filepath.Join(repoRoot, "hack", "tools.sh"), "e2e").Output()
		if err != nil {
			t.Fatalf("hack/tools.sh e2e: %v", err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		dir = lines[len(lines)-1]
	}
	return filepath.Join(dir, "helm")
}

// render runs helm template and returns the documents by "Kind/name".
func render(t *testing.T, args ...string) map[string]map[string]any {
	t.Helper()
	cmd := exec.Command(helm(t), append([]string{"template", "configstamp", chart, "--namespace", releaseNS}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	objs := map[string]map[string]any{}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("decode rendered chart: %v", err)
		}
		if obj == nil {
			continue
		}
		meta, _ := obj["metadata"].(map[string]any)
		objs[fmt.Sprintf("%v/%v", obj["kind"], meta["name"])] = obj
	}
	return objs
}

func renderMonitoring(t *testing.T, args ...string) (rule, dashboard map[string]any) {
	t.Helper()
	objs := render(t, append([]string{"--set", "prometheusRule.enabled=true", "--set", "grafanaDashboard.enabled=true"}, args...)...)
	rule, dashboard = objs["PrometheusRule/configstamp"], objs["ConfigMap/configstamp-dashboard"]
	if rule == nil || dashboard == nil {
		t.Fatalf("enabled, the chart renders no PrometheusRule/configstamp or ConfigMap/configstamp-dashboard")
	}
	return rule, dashboard
}

// ruleGroups parses the rendered PrometheusRule's groups as Prometheus loads a rule
// file: unknown fields, bad PromQL, bad durations and bad annotation templates fail.
func ruleGroups(t *testing.T, rule map[string]any) *rulefmt.RuleGroups {
	t.Helper()
	spec, err := yaml.Marshal(rule["spec"])
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(spec, false, model.UTF8Validation, promParser, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("PrometheusRule: %v", err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	return groups
}

// wantAlerts are the alerts issue 10 asks for (and three more), by name.
var wantAlerts = []string{
	"ConfigstampWebhookBypassed", "ConfigstampWebhookFailOpen", "ConfigstampAdmissionReadErrors",
	"ConfigstampWatcherCheckErrors", "ConfigstampAdmissionSlow", "ConfigstampNoLeader",
	"ConfigstampMetricsAbsent", "ConfigstampDebounceNotDraining", "ConfigstampWatcherQueueNotDraining", "ConfigstampHashKeyMismatch",
	"ConfigstampConfigReadTimeouts", "ConfigstampRecheckFoundChanges", "ConfigstampRolloutHalted",
}

// releaseNamespace is how the alerts may name {{ $labels.namespace }}, the namespace of
// configstamp's own series (not the namespace of the workloads it admits or checks).
var releaseNamespace = regexp.MustCompile(`(release namespace|configstamp replicas in)\s+\{\{ \$labels\.namespace \}\}`)

// TestRulesParse: the alerts load in Prometheus, each with a severity, a summary and a
// description, and select configstamp's series by job and namespace (or, the API server's,
// by configstamp's webhook entry names).
func TestRulesParse(t *testing.T) {
	rule, _ := renderMonitoring(t, "--set", "prometheusRule.alertLabels.team=platform")
	var alerts []string
	for _, g := range ruleGroups(t, rule).Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if r.Labels["severity"] == "" || r.Labels["team"] != "platform" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: want labels severity and team (alertLabels), annotations summary and description; got %v %v", r.Alert, r.Labels, r.Annotations)
			}
			checkSelectors(t, r.Alert, r.Expr, map[string]string{"job": "configstamp", "namespace": releaseNS})
			for _, text := range r.Annotations {
				if n := strings.Count(text, "$labels.namespace"); n != len(releaseNamespace.FindAllString(text, -1)) {
					t.Errorf("%s: {{ $labels.namespace }} is configstamp's release namespace, call it so: %q", r.Alert, text)
				}
			}
		}
	}
	if !slices.Equal(alerts, wantAlerts) {
		t.Errorf("alerts %v, want %v", alerts, wantAlerts)
	}

	// Without leader election there is no lease to alert on.
	rule, _ = renderMonitoring(t, "--set", "leaderElection.enabled=false", "--set", "watcher.replicas=1")
	for _, g := range ruleGroups(t, rule).Groups {
		for _, r := range g.Rules {
			if r.Alert == "ConfigstampNoLeader" {
				t.Error("ConfigstampNoLeader rendered with leaderElection.enabled=false")
			}
		}
	}
	// A selector of one's own replaces the default.
	rule, _ = renderMonitoring(t, "--set-string", `prometheusRule.selector=service="cs"`)
	for _, g := range ruleGroups(t, rule).Groups {
		for _, r := range g.Rules {
			checkSelectors(t, r.Alert, r.Expr, map[string]string{"service": "cs"})
		}
	}
}

// checkSelectors fails unless every selector of configstamp's own metrics matches want
// (label -> value, equality or regex) and every selector of the API server's matches
// configstamp's webhook entries only.
func checkSelectors(t *testing.T, where, expr string, want map[string]string) {
	t.Helper()
	e, err := promParser.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	for _, sel := range parser.ExtractSelectors(e) {
		name := metricName(sel)
		if strings.HasPrefix(name, "apiserver_") {
			m := matcher(sel, "name")
			if m == nil || !m.Matches("deployments.configstamp.io") || m.Matches("deployments.configstampXio") || m.Matches("other.example.com") {
				t.Errorf("%s: %s must select configstamp's webhook entries (name=~\".*\\\\.configstamp\\\\.io\")", where, name)
			}
			continue
		}
		for l, v := range want {
			if m := matcher(sel, l); m == nil || (m.Type != labels.MatchEqual && m.Type != labels.MatchRegexp) || m.Value != v {
				t.Errorf("%s: %s is not selected by %s %q", where, name, l, v)
			}
		}
	}
}

func matcher(sel []*labels.Matcher, name string) *labels.Matcher {
	for _, m := range sel {
		if m.Name == name {
			return m
		}
	}
	return nil
}

func metricName(sel []*labels.Matcher) string {
	if m := matcher(sel, labels.MetricName); m != nil && m.Type == labels.MatchEqual {
		return m.Value
	}
	return ""
}

// grafanaMacros are the interval variables Grafana replaces before a query reaches
// Prometheus; any value works for parsing.
var grafanaMacros = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "6h")

// labelValues is Grafana's variable query label_values(selector, label).
var labelValues = regexp.MustCompile(`^label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)

// dashboardQueries returns every PromQL query of the dashboard, by where it stands.
func dashboardQueries(t *testing.T, dash map[string]any) map[string]string {
	t.Helper()
	out := map[string]string{}
	var walk func([]any)
	walk = func(panels []any) {
		for _, p := range panels {
			panel, _ := p.(map[string]any)
			walk(asList(panel["panels"])) // a row's collapsed panels
			if panel["type"] == "row" {
				continue
			}
			targets := asList(panel["targets"])
			if len(targets) == 0 {
				t.Errorf("panel %q has no query", panel["title"])
			}
			for i, tg := range targets {
				expr, _ := tg.(map[string]any)["expr"].(string)
				out[fmt.Sprintf("panel %q query %d", panel["title"], i)] = expr
			}
		}
	}
	walk(asList(dash["panels"]))
	templating, _ := dash["templating"].(map[string]any)
	for _, v := range asList(templating["list"]) {
		variable, _ := v.(map[string]any)
		if variable["type"] != "query" {
			continue
		}
		q, _ := variable["query"].(map[string]any)
		query, _ := q["query"].(string)
		m := labelValues.FindStringSubmatch(query)
		if m == nil {
			t.Errorf("variable %v: query %q is not label_values(selector, label)", variable["name"], query)
			continue
		}
		out[fmt.Sprintf("variable %v", variable["name"])] = m[1]
	}
	return out
}

func asList(v any) []any { l, _ := v.([]any); return l }

// TestDashboardParses: the ConfigMap carries dashboards/configstamp.json as it is, and
// every query in it parses as PromQL and selects configstamp's series through the
// dashboard's namespace and job variables.
func TestDashboardParses(t *testing.T) {
	_, cm := renderMonitoring(t)
	meta, _ := cm["metadata"].(map[string]any)
	if l, _ := meta["labels"].(map[string]any); l["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v, want grafana_dashboard: \"1\"", l)
	}
	data, _ := cm["data"].(map[string]any)
	raw, _ := data["configstamp.json"].(string)
	file, err := os.ReadFile(filepath.Join(chart, "dashboards", "configstamp.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(raw) != strings.TrimSpace(string(file)) {
		t.Error("the ConfigMap's configstamp.json differs from dashboards/configstamp.json")
	}
	var dash map[string]any
	if err := json.Unmarshal([]byte(raw), &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if dash["uid"] != "configstamp" {
		t.Errorf("dashboard uid %v, want configstamp", dash["uid"])
	}
	ids := map[float64]bool{}
	var walk func([]any)
	walk = func(panels []any) {
		for _, p := range panels {
			panel, _ := p.(map[string]any)
			id, _ := panel["id"].(float64)
			if ids[id] {
				t.Errorf("panel %q: id %v is not unique", panel["title"], panel["id"])
			}
			ids[id] = true
			walk(asList(panel["panels"]))
		}
	}
	walk(asList(dash["panels"]))
	queries := dashboardQueries(t, dash)
	if len(queries) < 10 {
		t.Fatalf("%d queries in the dashboard, want its panels' and variables'", len(queries))
	}
	for where, q := range queries {
		own := map[string]string{"namespace": "$namespace", "job": "$job"}
		if strings.HasPrefix(where, "variable") {
			own = nil // the variables find the namespaces and jobs
		}
		checkSelectors(t, where, grafanaMacros.Replace(q), own)
	}
}

// targetLabels are labels Prometheus gives series (the scrape target's, external labels),
// which no /metrics shows.
var targetLabels = map[string]bool{
	"namespace": true, "cluster": true, "pod": true, "job": true, "instance": true,
	"service": true, "endpoint": true, "container": true,
}

// labelRef is a label an alert's annotations show.
var labelRef = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)

// liveSelectors returns the series one query needs from a /metrics, one selector per
// selector of the query: its metric name, its matchers on labels the exporter sets (not
// the target's labels, not Grafana's variables), and label!="" for each label the query
// aggregates by or, for an alert, its annotations show (shown).
func liveSelectors(t *testing.T, expr string, shown []string) []string {
	t.Helper()
	e, err := promParser.ParseExpr(expr)
	if err != nil {
		t.Fatalf("%q: %v", expr, err)
	}
	var out []string
	parser.Inspect(e, func(node parser.Node, path []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := metricName(vs.LabelMatchers)
		if name == "" {
			t.Errorf("%q: a selector without a metric name", expr)
			return nil
		}
		need := map[string]bool{}
		for _, l := range shown {
			need[l] = true
		}
		for _, p := range path {
			if agg, ok := p.(*parser.AggregateExpr); ok && !agg.Without {
				for _, l := range agg.Grouping {
					need[l] = true
				}
			}
		}
		var ms []string
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName || targetLabels[m.Name] || strings.Contains(m.Value, "$") {
				continue
			}
			ms = append(ms, m.String())
			delete(need, m.Name)
		}
		for l := range need {
			if !targetLabels[l] {
				ms = append(ms, l+`!=""`)
			}
		}
		slices.Sort(ms)
		if len(ms) == 0 {
			out = append(out, name)
		} else {
			out = append(out, name+"{"+strings.Join(ms, ", ")+"}")
		}
		return nil
	})
	return out
}

// TestMetricNames: the series the alerts and the dashboard select, found by Prometheus's
// parser (metric names, the label values they filter on, the labels they group by and
// show), are those testdata/metric-names.txt lists (which the integration test
// TestMonitoringMetricsExported finds on live /metrics). Run with
// CONFIGSTAMP_UPDATE_METRIC_NAMES=1 to rewrite the list.
func TestMetricNames(t *testing.T) {
	rule, cm := renderMonitoring(t)
	seen := map[string]bool{}
	for _, g := range ruleGroups(t, rule).Groups {
		for _, r := range g.Rules {
			var shown []string
			for _, text := range r.Annotations {
				for _, m := range labelRef.FindAllStringSubmatch(text, -1) {
					shown = append(shown, m[1])
				}
			}
			for _, s := range liveSelectors(t, r.Expr, shown) {
				seen[s] = true
			}
		}
	}
	var dash map[string]any
	data, _ := cm["data"].(map[string]any)
	if err := json.Unmarshal([]byte(data["configstamp.json"].(string)), &dash); err != nil {
		t.Fatal(err)
	}
	for _, q := range dashboardQueries(t, dash) {
		for _, s := range liveSelectors(t, grafanaMacros.Replace(q), nil) {
			seen[s] = true
		}
	}
	got := slices.Sorted(maps.Keys(seen))
	content := "# The series the chart's PrometheusRule and Grafana dashboard select (test/monitoring\n" +
		"# keeps this list in step with them; test/integration finds each on a live /metrics):\n" +
		"# metric names, matchers on labels the exporter sets, label!=\"\" for labels grouped by\n" +
		"# or shown in alerts. Target labels (job, namespace, pod, cluster...) are left out.\n" +
		strings.Join(got, "\n") + "\n"
	if os.Getenv("CONFIGSTAMP_UPDATE_METRIC_NAMES") != "" {
		if err := os.WriteFile(namesFile, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old, err := os.ReadFile(namesFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(old) != content {
		t.Errorf("%s is out of date (CONFIGSTAMP_UPDATE_METRIC_NAMES=1 rewrites it); want:\n%s", namesFile, content)
	}
}

// load makes a storage of series written as Prometheus's test language writes them
// ("name{labels} 0+1x30": one sample a minute from time 0), parsed by its parser.
func load(t *testing.T, input string) storage.Queryable {
	t.Helper()
	var all []storage.Series
	for _, line := range strings.Split(strings.TrimSpace(input), "\n") {
		lset, values, err := promParser.ParseSeriesDesc(line)
		if err != nil {
			t.Fatalf("series %q: %v", line, err)
		}
		var samples []chunks.Sample
		for i, v := range values {
			if !v.Omitted {
				samples = append(samples, sample{t: int64(i) * time.Minute.Milliseconds(), f: v.Value})
			}
		}
		all = append(all, storage.NewListSeries(lset, samples))
	}
	slices.SortFunc(all, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
	return &storage.MockQueryable{MockQuerier: &storage.MockQuerier{
		SelectMockFunction: func(_ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
			var out []storage.Series
			for _, s := range all {
				if matchesAll(s.Labels(), ms) {
					out = append(out, s)
				}
			}
			return &seriesSet{series: out, i: -1}
		},
	}}
}

func matchesAll(lset labels.Labels, ms []*labels.Matcher) bool {
	for _, m := range ms {
		if !m.Matches(lset.Get(m.Name)) {
			return false
		}
	}
	return true
}

// seriesSet iterates over a slice of series.
type seriesSet struct {
	series []storage.Series
	i      int
}

func (s *seriesSet) Next() bool                        { s.i++; return s.i < len(s.series) }
func (s *seriesSet) At() storage.Series                { return s.series[s.i] }
func (s *seriesSet) Err() error                        { return nil }
func (s *seriesSet) Warnings() annotations.Annotations { return nil }

// sample is one float sample.
type sample struct {
	t int64
	f float64
}

func (s sample) T() int64                      { return s.t }
func (s sample) ST() int64                     { return 0 }
func (s sample) F() float64                    { return s.f }
func (s sample) H() *histogram.Histogram       { return nil }
func (s sample) FH() *histogram.FloatHistogram { return nil }
func (s sample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s sample) Copy() chunks.Sample           { return s }
