package release

import (
	"sync/atomic"
	"testing"
)

// TestReleaserAfterBurst: the heap is released once per burst of work, after a look
// that saw none run, never while work runs nor at rest.
func TestReleaserAfterBurst(t *testing.T) {
	var work atomic.Uint64
	n := 0
	r := &Releaser{Work: &work, release: func() { n++ }}
	released, seen := uint64(0), uint64(0)
	look := func(added uint64, want int) {
		t.Helper()
		work.Add(added)
		released, seen = r.tick(released, seen)
		if n != want {
			t.Fatalf("after a look with %d new units of work: %d releases, want %d", added, n, want)
		}
	}
	look(0, 0)   // at rest
	look(100, 0) // work running
	look(5, 0)   // still running
	look(0, 1)   // quiet after the burst: released
	look(0, 1)   // at rest: not again
	look(0, 1)
	look(1, 1) // a fan-out, an admission
	look(0, 2) // quiet again
}

// TestReleaserTrickle: a trickle of work, one unit between every two looks, releases at
// most once per Gap looks, not at every other look.
func TestReleaserTrickle(t *testing.T) {
	var work atomic.Uint64
	n := 0
	r := &Releaser{Work: &work, gap: Gap, release: func() { n++ }}
	released, seen := uint64(0), uint64(0)
	for range Gap {
		work.Add(1)
		released, seen = r.tick(released, seen)
		released, seen = r.tick(released, seen)
	}
	if n != 2 {
		t.Fatalf("%d releases in %d looks of a trickle, want 2 (one per %d looks)", n, 2*Gap, Gap)
	}
}

// TestReleaserLeader: the watcher's releaser runs on the leader only, the webhook's on
// every replica.
func TestReleaserLeader(t *testing.T) {
	var work atomic.Uint64
	if !New(&work, true).NeedLeaderElection() || New(&work, false).NeedLeaderElection() {
		t.Fatal("NeedLeaderElection does not follow leader")
	}
}
