package watcher

import (
	"sync"
	"time"

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
		Help: "Workload stamp checks by the watcher, by result: current, recorded, nudged, held, paused, deferred, bypassed, bypass_abandoned, unread (the webhook could not read config), read_timeout (its own reads ran past --read-timeout), key_mismatch (another hash key met), waves_held (a change rolling in waves holds it), too_large, too_many_sources, error.",
	}, []string{"result"})
	wavesHeld = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "configstamp_waves_held_total",
		Help: "Checks that held a workload back because a change of a source it consumes rolls in waves (waiting for an earlier wave, or halted).",
	})
	wavesHalts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "configstamp_waves_halts_total",
		Help: "Changes rolling in waves that halted because a wave's workload did not become available (each also got a RolloutHalted Event on the source).",
	})
	bypasses = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "configstamp_bypasses_detected_total",
		Help: "Nudges after which the stored stamp still differed and the webhook gave no reason: it was not called (failurePolicy Ignore), or the marker was removed by something else.",
	})
	recheckQueued = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "configstamp_recheck_queued_total",
		Help: "Workloads (by kind) the periodic re-check queued because something they depend on moved since their last finished check.",
	}, []string{"kind"})
	recheckFound = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "configstamp_recheck_found_total",
		Help: "Workloads (by kind) the periodic re-check found on older config than current, with no event having rolled them, and rolled: changes the watcher's events missed.",
	}, []string{"kind"})
	keyMismatches = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "configstamp_hash_key_mismatches_total",
		Help: "Workloads left unrolled after repeated checks because the watcher and the record or the webhook replica disagreed on the hash key (each also got a HashKeyMismatch Event); still retried.",
	})
	readTimeouts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "configstamp_read_timeouts_total",
		Help: "Workloads whose check's config reads ran past --read-timeout on every retry (each also got a ConfigReadTimeout Event): left alone until their next event or the periodic re-check.",
	})
	debouncePending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "configstamp_debounce_pending",
		Help: "Sources (by kind: configmap, secret) changed and waiting to be quiet before their dependents are checked.",
	}, []string{"source"})
)

// burstAge exports, per source kind, the age of the oldest burst waiting for quiet,
// read at scrape time (a stuck burst keeps growing between events).
var burstAge = &burstAgeCollector{
	desc: prometheus.NewDesc("configstamp_debounce_oldest_seconds",
		"Age of the oldest changed source (by kind: configmap, secret) still waiting to be quiet; past --debounce-max it is not being handed on.",
		[]string{"source"}, nil),
	ages: map[string]func() time.Duration{},
}

type burstAgeCollector struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	ages map[string]func() time.Duration
}

// set makes age the source kind's reading (the running watcher's debouncer).
func (c *burstAgeCollector) set(kind string, age func() time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ages[kind] = age
}

func (c *burstAgeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *burstAgeCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for kind, age := range c.ages {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, age().Seconds(), kind)
	}
}

// queueDepth exports, per controller (a workload or source kind: bounded), how many
// namespaces have items in its fair queue and the most items one namespace has there,
// read at scrape time. No namespace label: a deep namespace is found in the logs.
var queueDepth = &queueDepthCollector{
	namespaces: prometheus.NewDesc("configstamp_queue_namespaces",
		"Namespaces with checks (or source events) queued, by controller; the queue serves them in turn.",
		[]string{"controller"}, nil),
	deepest: prometheus.NewDesc("configstamp_queue_deepest_namespace",
		"Most items one namespace has queued ready (retries waiting not counted), by controller: a namespace far deeper than the rest is a flood or a large fan-out, which the fair queue keeps from delaying the others.",
		[]string{"controller"}, nil),
	stats: map[string]func() (int, int){},
}

type queueDepthCollector struct {
	namespaces, deepest *prometheus.Desc
	mu                  sync.Mutex
	stats               map[string]func() (namespaces, deepest int)
}

// set makes stats the controller's reading (its running queue).
func (c *queueDepthCollector) set(controller string, stats func() (int, int)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats[controller] = stats
}

func (c *queueDepthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.namespaces
	ch <- c.deepest
}

func (c *queueDepthCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, stats := range c.stats {
		n, d := stats()
		ch <- prometheus.MustNewConstMetric(c.namespaces, prometheus.GaugeValue, float64(n), name)
		ch <- prometheus.MustNewConstMetric(c.deepest, prometheus.GaugeValue, float64(d), name)
	}
}

func init() {
	metrics.Registry.MustRegister(nudges, checks, wavesHeld, wavesHalts, bypasses, keyMismatches, readTimeouts, recheckQueued, recheckFound, debouncePending, burstAge, queueDepth)
	// Exported at 0 from the start, so the first errors are an increase to alerts, and
	// the alerts' label value is on /metrics for the monitoring integration test.
	checks.WithLabelValues("error")
}
