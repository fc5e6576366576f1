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
	"slices"
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

// monitoringMetrics lists every metric name the chart's PrometheusRule and Grafana
// dashboard use; test/monitoring derives it from them with Prometheus's own parser and
// fails when it is out of date.
var monitoringMetrics = filepath.Join(cluster.RepoRoot(), "test", "monitoring", "testdata", "metric-names.txt")

// TestMonitoringMetricsExported proves that the alerts and the dashboard name only
// metrics that exist: configstamp's (one replica with leader election that admitted,
// saw a ConfigMap change and nudged, so every lazily created series is there) and the
// API server's (its fail-open counter appears only after a webhook failed open, so one is
// made to: a registration whose entry is named like configstamp's points at a closed
// port).
func TestMonitoringMetricsExported(t *testing.T) {
	raw, err := os.ReadFile(monitoringMetrics)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, l := range strings.Split(string(raw), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			want = append(want, l)
		}
	}
	if len(want) == 0 {
		t.Fatalf("%s lists no metric", monitoringMetrics)
	}

	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", port)
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
	framework.Eventually(t, 20*time.Second, "every metric the alerts and the dashboard use", func() error {
		own := sampleNames(t, func() (io.ReadCloser, error) {
			resp, err := http.Get("http://" + metricsAddr + "/metrics")
			if err != nil {
				return nil, err
			}
			return resp.Body, nil
		})
		apiserver := sampleNames(t, api)
		if os.Getenv("CONFIGSTAMP_TEST_DUMP_METRICS") != "" {
			t.Logf("configstamp:\n%s\napiserver:\n%s", strings.Join(slices.Sorted(maps.Keys(own)), "\n"), strings.Join(slices.Sorted(maps.Keys(apiserver)), "\n"))
		}
		var missing []string
		for _, name := range want {
			from := own
			if strings.HasPrefix(name, "apiserver_") {
				from = apiserver
			}
			if !from[name] {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("not exported: %s", strings.Join(missing, ", "))
		}
		return nil
	})
}

// failOpen registers a webhook entry named like configstamp's (".configstamp.io") that
// points at a closed port, with failurePolicy Ignore and an object selector only one
// ConfigMap matches, and creates that ConfigMap (dry run) until the API server counts a
// fail-open for it.
func failOpen(t *testing.T, ns string) {
	t.Helper()
	closed, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
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
		if !sampleNames(t, api)["apiserver_admission_webhook_fail_open_count"] {
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

// sampleNames reads a Prometheus text exposition and returns the names of its samples
// (a histogram's _bucket, _sum and _count, as PromQL names them).
func sampleNames(t *testing.T, get func() (io.ReadCloser, error)) map[string]bool {
	t.Helper()
	body, err := get()
	if err != nil {
		t.Fatalf("scrape metrics: %v", err)
	}
	defer body.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			out[line[:i]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("scrape metrics: %v", err)
	}
	return out
}
