package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/promtext"
)

// scrape reads configstamp's Prometheus endpoint into "name{labels}" -> value.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	return promtext.MustScrape(t, addr)
}

func testMetrics(t *testing.T, cs *framework.Configstamp, metricsAddr string) {
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "m", map[string]string{"k": "1"}))
	createDeployment(t, ns, "app", podWithVolumes("m"))
	setData(t, ns, "m", "k", "2")
	waitStamp(t, ns, "app", docHash(t, ns, docSource{name: "m"}))
	framework.Eventually(t, 10*time.Second, "metrics", func() error {
		m := scrape(t, metricsAddr)
		for _, want := range []string{
			`configstamp_admission_requests_total{result="stamped"}`,
			`configstamp_admission_duration_seconds_count{result="stamped"}`,
			`configstamp_stamps_changed_total`,
			`configstamp_nudges_total`,
			`configstamp_checks_total{result="nudged"}`,
		} {
			if m[want] < 1 {
				return fmt.Errorf("%s = %v, want >= 1", want, m[want])
			}
		}
		if _, ok := m[`configstamp_debounce_pending{source="configmap"}`]; !ok {
			return fmt.Errorf(`configstamp_debounce_pending{source="configmap"} missing`)
		}
		return nil
	})
}
