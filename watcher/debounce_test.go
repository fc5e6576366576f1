package watcher

import (
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

	if w := d.ready("cm"); w != 0 {
		t.Fatalf("key without events: wait %v, want 0", w)
	}
	d.touch("cm")
	if w := d.ready("cm"); w != 2*time.Second {
		t.Fatalf("just touched: wait %v, want 2s", w)
	}
	// Events every 1.5s keep pushing the due time: quiet, not a fixed window.
	for i := 0; i < 3; i++ {
		clk.advance(1500 * time.Millisecond)
		d.touch("cm")
		if w := d.ready("cm"); w != 2*time.Second {
			t.Fatalf("event %d: wait %v, want 2s", i, w)
		}
	}
	clk.advance(1999 * time.Millisecond)
	if w := d.ready("cm"); w != time.Millisecond {
		t.Fatalf("almost quiet: wait %v, want 1ms", w)
	}
	clk.advance(time.Millisecond)
	if w := d.ready("cm"); w != 0 {
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
	d.touch("cm")
	for elapsed := time.Duration(0); elapsed < 4*time.Second; elapsed += time.Second {
		clk.advance(time.Second)
		d.touch("cm")
	}
	// 4s after the first event, with an event just now: the cap (5s) comes first.
	if w := d.ready("cm"); w != time.Second {
		t.Fatalf("wait %v, want 1s (capped)", w)
	}
	clk.advance(time.Second)
	d.touch("cm")
	if w := d.ready("cm"); w != 0 {
		t.Fatalf("at the cap: wait %v, want 0", w)
	}
}

func TestDebouncerZeroQuietIsImmediate(t *testing.T) {
	d := newDebouncer[string](0, 0)
	d.touch("cm")
	if w := d.ready("cm"); w != 0 {
		t.Fatalf("wait %v, want 0", w)
	}
}

func TestDebouncerKeysAreIndependent(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	d := newDebouncer[string](time.Second, time.Minute)
	d.now = clk.now
	d.touch("a")
	clk.advance(600 * time.Millisecond)
	d.touch("b")
	clk.advance(400 * time.Millisecond)
	if d.ready("a") != 0 {
		t.Fatal("a should be quiet")
	}
	if w := d.ready("b"); w != 600*time.Millisecond {
		t.Fatalf("b: wait %v, want 600ms", w)
	}
}
