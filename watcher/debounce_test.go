package watcher

import (
	"reflect"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestDebouncerWaitsForQuiet(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	d := newDebouncer[string](2*time.Second, 10*time.Second)
	d.now = clk.now

	if over, _, w := d.ready("cm"); over || w != 0 {
		t.Fatalf("key without events: over %v wait %v, want nothing pending", over, w)
	}
	d.touch("cm", true)
	if over, _, w := d.ready("cm"); over || w != 2*time.Second {
		t.Fatalf("just touched: wait %v, want 2s", w)
	}
	// Events every 1.5s keep pushing the due time: quiet, not a fixed window.
	for i := 0; i < 3; i++ {
		clk.advance(1500 * time.Millisecond)
		d.touch("cm", true)
		if over, _, w := d.ready("cm"); over || w != 2*time.Second {
			t.Fatalf("event %d: wait %v, want 2s", i, w)
		}
	}
	clk.advance(1999 * time.Millisecond)
	if over, _, w := d.ready("cm"); over || w != time.Millisecond {
		t.Fatalf("almost quiet: wait %v, want 1ms", w)
	}
	clk.advance(time.Millisecond)
	if over, _, w := d.ready("cm"); !over || w != 0 {
		t.Fatalf("quiet: wait %v, want 0", w)
	}
	if d.len() != 0 {
		t.Fatal("burst not ended once ready")
	}
}

func TestDebouncerCapsANeverEndingBurst(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	d := newDebouncer[string](2*time.Second, 5*time.Second)
	d.now = clk.now
	d.touch("cm", true)
	for elapsed := time.Duration(0); elapsed < 4*time.Second; elapsed += time.Second {
		clk.advance(time.Second)
		d.touch("cm", true)
	}
	// 4s after the first event, with an event just now: the cap (5s) comes first.
	if over, _, w := d.ready("cm"); over || w != time.Second {
		t.Fatalf("wait %v, want 1s (capped)", w)
	}
	clk.advance(time.Second)
	d.touch("cm", true)
	if over, _, w := d.ready("cm"); !over || w != 0 {
		t.Fatalf("at the cap: wait %v, want 0", w)
	}
}

func TestDebouncerZeroQuietIsImmediate(t *testing.T) {
	d := newDebouncer[string](0, 0)
	d.touch("cm", true)
	if over, _, w := d.ready("cm"); !over || w != 0 {
		t.Fatalf("wait %v, want 0", w)
	}
}

func TestDebouncerKeysAreIndependent(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	d := newDebouncer[string](time.Second, time.Minute)
	d.now = clk.now
	d.touch("a", true)
	clk.advance(600 * time.Millisecond)
	d.touch("b", true)
	clk.advance(400 * time.Millisecond)
	if over, _, w := d.ready("a"); !over || w != 0 {
		t.Fatal("a should be quiet")
	}
	if over, _, w := d.ready("b"); over || w != 600*time.Millisecond {
		t.Fatalf("b: wait %v, want 600ms", w)
	}
}

func TestDebouncerRemembersARealChange(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	d := newDebouncer[string](time.Second, time.Minute)
	d.now = clk.now
	d.touch("replayed", false)
	d.touch("mixed", false)
	d.touch("mixed", true)
	d.touch("mixed", false)
	clk.advance(time.Second)
	if over, changed, _ := d.ready("replayed"); !over || changed {
		t.Fatalf("replay only: over %v changed %v, want true false", over, changed)
	}
	if over, changed, _ := d.ready("mixed"); !over || !changed {
		t.Fatalf("burst with a real change: over %v changed %v, want true true", over, changed)
	}
}

func TestDebouncerRestoreKeepsAFailedChange(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	d := newDebouncer[string](2*time.Second, 10*time.Second)
	d.now = clk.now
	d.touch("cm", true)
	clk.advance(2 * time.Second)
	over, changed, _ := d.ready("cm")
	if !over || !changed || !d.pending("cm") {
		t.Fatalf("ready: over %v changed %v pending %v (want still pending while handed on)", over, changed, d.pending("cm"))
	}
	// The fan-out failed: the change is put back, due at once, still a real change.
	d.restore("cm", changed)
	if !d.pending("cm") {
		t.Fatal("restored burst not pending")
	}
	if over, changed, w := d.ready("cm"); !over || !changed || w != 0 {
		t.Fatalf("after restore: over %v changed %v wait %v, want due at once and changed", over, changed, w)
	}
	// An event that arrived meanwhile keeps its own wait.
	d.touch("cm", false)
	d.restore("cm", true)
	if over, _, w := d.ready("cm"); over || w != 2*time.Second {
		t.Fatalf("restore over a newer event: over %v wait %v, want the event's quiet time", over, w)
	}
	clk.advance(2 * time.Second)
	if over, changed, _ := d.ready("cm"); !over || !changed {
		t.Fatalf("the restored change was lost: over %v changed %v", over, changed)
	}
}

func TestDebouncerPendingUntilDone(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	d := newDebouncer[string](time.Second, 10*time.Second)
	d.now = clk.now
	d.touch("cm", true)
	clk.advance(time.Second)
	if over, _, _ := d.ready("cm"); !over {
		t.Fatal("not over")
	}
	if !d.pending("cm") {
		t.Fatal("not pending while its dependents are handed on")
	}
	d.done("cm")
	if d.pending("cm") || d.len() != 0 {
		t.Fatal("still pending after done")
	}
}

// TestDebouncerOldestBurst: the age of the oldest waiting burst grows while it waits
// (read at scrape time, not only at events) and drops once it is handed on.
func TestDebouncerOldestBurst(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	d := newDebouncer[string](2*time.Second, 10*time.Second)
	d.now = clk.now
	if d.oldest() != 0 {
		t.Fatal("age without bursts")
	}
	d.touch("a", true)
	clk.advance(3 * time.Second)
	d.touch("b", true)
	clk.advance(time.Second)
	if got := d.oldest(); got != 4*time.Second {
		t.Fatalf("oldest %v, want 4s", got)
	}
	clk.advance(time.Hour) // no event: nobody asked ready, still growing
	if got := d.oldest(); got != time.Hour+4*time.Second {
		t.Fatalf("oldest %v after an hour without hand-off", got)
	}
	d.ready("a")
	d.ready("b")
	if got := d.oldest(); got != 0 {
		t.Fatalf("oldest %v after both were handed on, want 0", got)
	}
}

// TestDebouncerLetsGoOfABurst: once every key of a burst of thousands is handed on, the
// debouncer holds maps made afresh, not the ones grown for the burst (a Go map keeps
// its room after deletes: about 1 MiB at 10,000 keys, for good).
func TestDebouncerLetsGoOfABurst(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	d := newDebouncer[int](time.Second, 10*time.Second)
	d.now = clk.now
	for i := range 10000 {
		d.touch(i, true)
	}
	burst := reflect.ValueOf(d.burst).Pointer()
	clk.advance(time.Second)
	for i := range 10000 {
		if over, _, _ := d.ready(i); !over {
			t.Fatalf("key %d not ready after the quiet", i)
		}
	}
	flight := reflect.ValueOf(d.flight).Pointer()
	for i := range 10000 {
		d.done(i)
	}
	if reflect.ValueOf(d.burst).Pointer() == burst || reflect.ValueOf(d.flight).Pointer() == flight {
		t.Fatal("the debouncer still holds the maps grown for the burst")
	}
	d.touch(1, true) // and still works
	clk.advance(time.Second)
	if over, changed, _ := d.ready(1); !over || !changed {
		t.Fatal("a new burst after the old one was not handed on")
	}
}
