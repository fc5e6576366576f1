package watcher

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	nudges = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "configstamp_nudges_total",
		Help: "Empty updates sent to Deployments whose stamp no longer matched their config.",
	})
	checks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "configstamp_checks_total",
		Help: "Deployment stamp checks by the watcher, by result (current, nudged, bypassed, error).",
	}, []string{"result"})
	bypasses = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "configstamp_bypasses_detected_total",
		Help: "Nudges after which the stored stamp still differed: the webhook was not called (failurePolicy Ignore).",
	})
	debouncePending = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "configstamp_debounce_pending",
		Help: "ConfigMaps changed and waiting to be quiet before their dependents are checked.",
	})
)

func init() {
	metrics.Registry.MustRegister(nudges, checks, bypasses, debouncePending)
}
