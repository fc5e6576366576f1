package watcher

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	nudges = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "configstamp_nudges_total",
		Help: "Empty updates sent to workloads whose stamp no longer matched their config.",
	})
	checks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "configstamp_checks_total",
		Help: "Workload stamp checks by the watcher, by result (current, nudged, bypassed, error).",
	}, []string{"result"})
	bypasses = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "configstamp_bypasses_detected_total",
		Help: "Nudges after which the stored stamp still differed: the webhook was not called (failurePolicy Ignore).",
	})
	debouncePending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "configstamp_debounce_pending",
		Help: "Sources (by kind: configmap, secret) changed and waiting to be quiet before their dependents are checked.",
	}, []string{"source"})
)

func init() {
	metrics.Registry.MustRegister(nudges, checks, bypasses, debouncePending)
}
