package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRenderMonitoring: the PrometheusRule and the Grafana dashboard ConfigMap are
// rendered only when asked for, with the labels their operators select them by. (What
// they say is checked with Prometheus's own code in test/monitoring.)
func TestRenderMonitoring(t *testing.T) {
	const rule, dashboard = "PrometheusRule/configstamp", "ConfigMap/configstamp-dashboard"
	objs := render(t)
	for _, key := range []string{rule, dashboard} {
		if _, ok := objs[key]; ok {
			t.Errorf("%s rendered by default", key)
		}
	}

	tool(t, "helm", "lint", chart, "--set", "prometheusRule.enabled=true", "--set", "grafanaDashboard.enabled=true")
	objs = render(t, "--set", "prometheusRule.enabled=true", "--set", "prometheusRule.labels.release=kps",
		"--set", "grafanaDashboard.enabled=true", "--set", "grafanaDashboard.annotations.grafana_folder=ops")
	r, ok := objs[rule]
	if !ok {
		t.Fatalf("prometheusRule.enabled renders no %s", rule)
	}
	if r.GetAPIVersion() != "monitoring.coreos.com/v1" || r.GetNamespace() != releaseNS || r.GetLabels()["release"] != "kps" {
		t.Errorf("%s: apiVersion %s, namespace %s, labels %v", rule, r.GetAPIVersion(), r.GetNamespace(), r.GetLabels())
	}
	d, ok := objs[dashboard]
	if !ok {
		t.Fatalf("grafanaDashboard.enabled renders no %s", dashboard)
	}
	if d.GetNamespace() != releaseNS || d.GetLabels()["grafana_dashboard"] != "1" || d.GetAnnotations()["grafana_folder"] != "ops" {
		t.Errorf("%s: namespace %s, labels %v, annotations %v", dashboard, d.GetNamespace(), d.GetLabels(), d.GetAnnotations())
	}
	data, _ := d.Object["data"].(map[string]any)
	got, _ := data["configstamp.json"].(string)
	want, err := os.ReadFile(filepath.Join(chart, "dashboards", "configstamp.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(got) != strings.TrimSpace(string(want)) || !json.Valid([]byte(got)) {
		t.Errorf("%s does not carry dashboards/configstamp.json as it is", dashboard)
	}

	// Each on its own, and the dashboard where Grafana's sidecar looks.
	objs = render(t, "--set", "grafanaDashboard.enabled=true", "--set", "grafanaDashboard.namespace=monitoring")
	if _, ok := objs[rule]; ok {
		t.Errorf("%s rendered with only the dashboard enabled", rule)
	}
	if d, ok := objs[dashboard]; !ok || d.GetNamespace() != "monitoring" {
		t.Errorf("grafanaDashboard.namespace=monitoring: %s not rendered in monitoring", dashboard)
	}
	objs = render(t, "--set", "prometheusRule.enabled=true")
	if _, ok := objs[dashboard]; ok {
		t.Errorf("%s rendered with only the rule enabled", dashboard)
	}
}
