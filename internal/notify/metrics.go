package notify

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	notifications = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "configstamp_notifications_total",
		Help: "Notification messages by result: sent, failed (every try failed, or the receiver refused it), dropped (a queue was full).",
	}, []string{"result"})
	retries = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "configstamp_notification_retries_total",
		Help: "Tries of a notification message after a failed one (a network error, a timeout, a 5xx, 408 or 429).",
	})
)

func init() {
	metrics.Registry.MustRegister(notifications, retries)
	for _, r := range []string{"sent", "failed", "dropped"} {
		notifications.WithLabelValues(r)
	}
}
