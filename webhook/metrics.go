package webhook

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Admission results, the label of the admission metrics.
const (
	resultStamped   = "stamped"   // the stamp was written or changed
	resultUnchanged = "unchanged" // stamp computed, already current
	resultSkipped   = "skipped"   // not stamped: opted out, lazy adoption, other kind or operation
	resultHeld      = "held"      // stored stamp kept: the new one would make required config missing
	resultReadError = "read_error"
	resultOtherKey  = "other_key" // stored stamp kept: a nudge sent under another hash key than this replica's
	resultTooLarge  = "too_large" // not stamped: the stamp would pass the API server's annotation size limit
	resultRejected  = "rejected"  // malformed request, or a body that is no AdmissionReview
	resultPanic     = "panic"     // the handler panicked (controller-runtime answers 500; a bug)

	// Answered allowed, unstamped, with nothing read: reviews the API server would not
	// send (forged, or a registration wider than the flags), or that wait too long.
	resultNamespaceMismatch = "namespace_mismatch" // the object's namespace is not the request's
	resultOutOfScope        = "out_of_scope"       // namespace excluded, or neither it nor the workload opted in
	resultScopeUnknown      = "scope_unknown"      // the namespace cache is not ready or lacks the namespace (a warning says so)
	resultTooManySources    = "too_many_sources"   // more sources than --max-sources: the stored stamp kept
	resultBusy              = "busy"               // no slot within --webhook-max-in-flight in time: answered 429, not read
)

var (
	admissionRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "configstamp_admission_requests_total",
		Help: "Workload admission requests handled, by result (stamped, unchanged, skipped, held, read_error, other_key, too_large, rejected, panic, namespace_mismatch, out_of_scope, scope_unknown, too_many_sources, body_too_large, busy).",
	}, []string{"result"})
	admissionDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "configstamp_admission_duration_seconds",
		Help: "Time to handle one admission request, live ConfigMap and Secret reads included, by result.",
		// Up to the API server's longest timeout (30 s), so a p99 near any timeout is seen.
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 15, 20, 30},
	}, []string{"result"})
	recordsOmitted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "configstamp_admission_records_omitted_total",
		Help: "Admissions that stamped a workload without its record of the config its pods run: its metadata annotations were near the API server's size limit.",
	})
	bodiesTooLarge = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "configstamp_admission_bodies_too_large_total",
		Help: "Admission requests whose body passed --webhook-max-request-bytes: answered 413 unread (the API server admits them under failurePolicy Ignore); also counted as rejected.",
	})
	inFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "configstamp_admissions_in_flight",
		Help: "Admission requests being read or handled now (at most --webhook-max-in-flight).",
	})
	stampsChanged = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "configstamp_stamps_changed_total",
		Help: "Admissions that wrote a new or changed config hash (dry runs excluded).",
	})
)

func init() {
	metrics.Registry.MustRegister(admissionRequests, admissionDuration, recordsOmitted, bodiesTooLarge, inFlight, stampsChanged)
	// Exported at 0 from the start, so the first read errors are an increase to alerts,
	// and the alerts' label value is on /metrics for the monitoring integration test.
	admissionRequests.WithLabelValues(resultReadError)
}

func observe(result string, start time.Time) {
	admissionRequests.WithLabelValues(result).Inc()
	admissionDuration.WithLabelValues(result).Observe(time.Since(start).Seconds())
}
