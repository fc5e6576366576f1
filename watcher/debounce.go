package watcher

import (
	"sync"
	"time"
)

// debouncer decides when a key has been quiet long enough: it waits until no event has
// arrived for quiet, but never longer than max after the first event of a burst, so a
// ConfigMap that never stops changing still rolls. A workqueue's AddAfter alone keeps the
// earliest due time, which is a fixed window from the first event, not a quiet period.
type debouncer[K comparable] struct {
	quiet, max time.Duration
	now        func() time.Time
	// gauge, when set, shows how many keys are in a burst.
	gauge interface{ Set(float64) }

	mu    sync.Mutex
	burst map[K]window
	// flight holds the keys whose burst is over but whose dependents are still being
	// handed on (between ready and done or restore): still pending for the checks.
	flight map[K]struct{}
}

type window struct {
	first, last time.Time
	// changed is true when any event of the burst was a real change (not a replay).
	changed bool
}

func newDebouncer[K comparable](quiet, max time.Duration) *debouncer[K] {
	if max < quiet {
		max = quiet
	}
	return &debouncer[K]{quiet: quiet, max: max, now: time.Now, burst: map[K]window{}, flight: map[K]struct{}{}}
}

// touch records an event for key; changed tells a real change from a replay.
func (d *debouncer[K]) touch(key K, changed bool) {
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	w, ok := d.burst[key]
	if !ok {
		w.first = now
	}
	w.last = now
	w.changed = w.changed || changed
	d.burst[key] = w
	d.report()
}

// ready reports whether key's burst is over (quiet for long enough, or capped), ending
// it, and whether the burst held a real change. An ended burst stays pending until done
// (or restore) is called for it. While it is not over, it returns how
// long to wait before asking again. A key without a burst has nothing pending: not
// ready, and no wait.
func (d *debouncer[K]) ready(key K) (over, changed bool, wait time.Duration) {
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	w, ok := d.burst[key]
	if !ok {
		return false, false, 0
	}
	due := w.last.Add(d.quiet)
	if capAt := w.first.Add(d.max); capAt.Before(due) {
		due = capAt
	}
	if wait := due.Sub(now); wait > 0 {
		return false, false, wait
	}
	delete(d.burst, key)
	d.burst = emptied(d.burst)
	d.flight[key] = struct{}{}
	d.report()
	return true, w.changed, 0
}

// done ends the hand-off of a burst that ready ended.
func (d *debouncer[K]) done(key K) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.flight, key)
	d.flight = emptied(d.flight)
}

// restore puts back a burst that ready ended but whose work failed: it is due at once,
// and remembers whether it held a real change; events since are kept.
func (d *debouncer[K]) restore(key K, changed bool) {
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.flight, key)
	w, ok := d.burst[key]
	if !ok {
		w = window{first: now.Add(-d.max), last: now.Add(-d.quiet)}
	}
	w.changed = w.changed || changed
	d.burst[key] = w
	d.report()
}

// pending reports whether key has a burst waiting to be quiet, or one being handed on.
func (d *debouncer[K]) pending(key K) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, waiting := d.burst[key]
	_, flying := d.flight[key]
	return waiting || flying
}

// waiting reports whether key has a burst waiting to be quiet (not one being handed on).
func (d *debouncer[K]) waiting(key K) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.burst[key]
	return ok
}

// oldest returns how long the oldest burst waiting for quiet has lasted (0: none). A
// burst ends at the latest debounce-max after its first event, so an age well past it
// means bursts are not being handed on.
func (d *debouncer[K]) oldest() time.Duration {
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	var age time.Duration
	for _, w := range d.burst {
		age = max(age, now.Sub(w.first))
	}
	return age
}

// len returns the number of keys waiting for quiet.
func (d *debouncer[K]) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.burst)
}

func (d *debouncer[K]) report() {
	if d.gauge != nil {
		d.gauge.Set(float64(len(d.burst)))
	}
}

// emptied is m, or a new map when m is empty: a Go map keeps the room it grew to, so a
// map emptied after a burst of 10,000 keys would hold that memory for good.
func emptied[K comparable, V any](m map[K]V) map[K]V {
	if len(m) == 0 {
		return map[K]V{}
	}
	return m
}
