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

	mu    sync.Mutex
	burst map[K]window
}

type window struct{ first, last time.Time }

func newDebouncer[K comparable](quiet, max time.Duration) *debouncer[K] {
	if max < quiet {
		max = quiet
	}
	return &debouncer[K]{quiet: quiet, max: max, now: time.Now, burst: map[K]window{}}
}

// touch records an event for key.
func (d *debouncer[K]) touch(key K) {
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	w, ok := d.burst[key]
	if !ok {
		w.first = now
	}
	w.last = now
	d.burst[key] = w
}

// ready returns 0 when key may be acted on now, ending its burst; otherwise how long to
// wait before asking again. A key without a burst is ready.
func (d *debouncer[K]) ready(key K) time.Duration {
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	w, ok := d.burst[key]
	if !ok {
		return 0
	}
	due := w.last.Add(d.quiet)
	if capAt := w.first.Add(d.max); capAt.Before(due) {
		due = capAt
	}
	if wait := due.Sub(now); wait > 0 {
		return wait
	}
	delete(d.burst, key)
	return 0
}

// len returns the number of keys waiting for quiet.
func (d *debouncer[K]) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.burst)
}
