package faults

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/promtext"
)

// The watcher's own delays (watcher/setup.go defaults), which tell when it has nothing
// left to do.
const (
	// retryMax is the longest wait before a failed check is retried (RetryMax).
	retryMax = 30 * time.Second
	// minRolloutInterval is the longest a deferred rollout waits (MinRolloutInterval).
	minRolloutInterval = 10 * time.Second
	// quietFor is how long no reconcile at all must have run (longer than the
	// debounce of an update event, 3 s at most here, and a requeue after a second).
	quietFor = 5 * time.Second
)

// cs is one configstamp process of a scenario with its metrics endpoint, sampled in the
// background so that the last change of its counters is known.
type cs struct {
	*framework.Configstamp
	metrics string

	mu      sync.Mutex
	last    map[string]float64
	changed map[string]time.Time
}

// tracked are the counters whose last change idle needs, by short name.
var tracked = map[string]string{
	"reconciles": "controller_runtime_reconcile_total",
	"deferred":   `configstamp_checks_total{result="deferred"}`,
}

// withMetrics serves the process's metrics on a free loopback port (the last flag
// wins over the framework's "0") and returns the address.
func withMetrics(t *testing.T, o framework.Options) (framework.Options, string) {
	t.Helper()
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	o.Args = append(append([]string(nil), o.Args...), "--metrics-bind-address", addr)
	return o, addr
}

// watch samples p's counters every 250 ms until the test ends.
func watch(t *testing.T, p *framework.Configstamp, addr string) *cs {
	c := &cs{Configstamp: p, metrics: addr, last: map[string]float64{}, changed: map[string]time.Time{}}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			c.sample()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return c
}

func (c *cs) sample() {
	m, err := scrape(c.metrics)
	if err != nil {
		return
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for short, name := range tracked {
		v := m[name]
		old, seen := c.last[short]
		switch {
		case !seen && v == 0: // nothing yet: as if long ago
			c.last[short] = v
		case !seen || old != v:
			c.last[short], c.changed[short] = v, now
		}
	}
}

var metricsClient = &http.Client{Timeout: 2 * time.Second} // a paused process answers nothing

// scrape reads a Prometheus endpoint: every series by its full name (with labels, as
// printed) and every family (name without labels) as the sum of its series.
func scrape(addr string) (map[string]float64, error) {
	m, err := promtext.Scrape(metricsClient, addr)
	if err != nil {
		return nil, err
	}
	return promtext.WithFamilies(m), nil
}

// metric reads one series (or a family's sum) of c now; absent is 0.
func (c *cs) metric(t *testing.T, name string) float64 {
	t.Helper()
	m, err := scrape(c.metrics)
	if err != nil {
		t.Fatalf("metrics of configstamp (pid %d): %v", c.PID(), err)
	}
	return m[name]
}

// nudges is configstamp_nudges_total of c.
func (c *cs) nudges(t *testing.T) int {
	t.Helper()
	return int(c.metric(t, "configstamp_nudges_total"))
}

// idle says why c may still act ("" when it will not, unless something changes): a
// source waiting out its debounce, work queued or in progress, a reconcile in the
// last quietFor, a deferred rollout within the least rollout interval, a failed check
// whose retry is not due yet (see retryDue). A process that has exited, or stands by, has nothing to do.
func (c *cs) idle() string {
	if !c.Alive() {
		return ""
	}
	m, err := scrape(c.metrics)
	if err != nil {
		return err.Error()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	switch {
	case m["configstamp_debounce_pending"] > 0:
		return fmt.Sprintf("%.0f sources debouncing", m["configstamp_debounce_pending"])
	case m["workqueue_depth"] > 0:
		return fmt.Sprintf("%.0f queued", m["workqueue_depth"])
	case m["controller_runtime_active_workers"] > 0:
		return fmt.Sprintf("%.0f reconciles running", m["controller_runtime_active_workers"])
	case now.Sub(c.changed["reconciles"]) < quietFor:
		return "a reconcile " + now.Sub(c.changed["reconciles"]).Round(time.Millisecond).String() + " ago"
	case now.Sub(c.changed["deferred"]) < minRolloutInterval+time.Second:
		return "a deferred rollout " + now.Sub(c.changed["deferred"]).Round(time.Millisecond).String() + " ago"
	}
	if key, due := c.retryDue(); now.Before(due) {
		return fmt.Sprintf("the retry of %s's failed check is due in %s", key, due.Sub(now).Round(time.Millisecond))
	}
	return ""
}

// retryDue is when the latest retry still owed to a failed check is due, at the latest,
// from c's log: a workload whose last record is a "Reconciler error" waits in the queue
// (invisible to its depth) RetryBase doubled at each consecutive failure, at most
// RetryMax; the log's times have one-second resolution, hence a second more. Any
// other record of the workload's controller about it (every check logs one at debug
// level) ends the run of failures; one that does not only makes the wait longer.
func (c *cs) retryDue() (string, time.Time) {
	type run struct {
		n    int
		last time.Time
	}
	runs := map[string]*run{}
	for _, rec := range c.Logs() {
		ctrl, _ := rec["controller"].(string)
		ns, _ := rec["namespace"].(string)
		name, _ := rec["name"].(string)
		if ctrl == "" || name == "" {
			continue
		}
		key := ctrl + " " + ns + "/" + name
		if rec["msg"] != "Reconciler error" {
			delete(runs, key)
			continue
		}
		ts, _ := rec["ts"].(string)
		at, err := time.Parse(time.RFC3339, ts)
		if err != nil {
			at = time.Now() // unknown: as if now
		}
		r := runs[key]
		if r == nil {
			r = &run{}
			runs[key] = r
		}
		r.n++
		r.last = at
	}
	var latest time.Time
	which := ""
	for key, r := range runs {
		wait := retryMax
		if r.n <= 7 { // 500ms * 2^6 = 32s: past RetryMax
			wait = min(retryBase<<(r.n-1), retryMax)
		}
		if due := r.last.Add(wait + time.Second); due.After(latest) {
			latest, which = due, key
		}
	}
	return which, latest
}

// nudgedLines counts c's "Nudged Deployment" log lines by namespace/name.
func (c *cs) nudgedLines() map[string]int {
	out := map[string]int{}
	for _, rec := range c.Logs() {
		if rec["msg"] == "Nudged Deployment after a config change" {
			ns, _ := rec["namespace"].(string)
			name, _ := rec["name"].(string)
			out[ns+"/"+name]++
		}
	}
	return out
}

// sum adds up a count map.
func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
