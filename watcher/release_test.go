package watcher

import (
	"sync/atomic"
	"testing"
)

// TestReleaserAfterBurst: the heap is released once per burst of checks, after a look
// that saw none run, never while checks run nor at rest.
func TestReleaserAfterBurst(t *testing.T) {
	var checks atomic.Uint64
	n := 0
	r := &releaser{checks: &checks, release: func() { n++ }}
	released, seen := uint64(0), uint64(0)
	look := func(added uint64, want int) {
		t.Helper()
		checks.Add(added)
		released, seen = r.tick(released, seen)
		if n != want {
			t.Fatalf("after a look with %d new checks: %d releases, want %d", added, n, want)
		}
	}
	look(0, 0)   // at rest
	look(100, 0) // checks running
	look(5, 0)   // still running
	look(0, 1)   // quiet after the burst: released
	look(0, 1)   // at rest: not again
	look(0, 1)
	look(1, 1) // a fan-out
	look(0, 2) // quiet again
}
