// Package release returns to the OS the heap a burst of work freed, once the work has
// stopped: the watcher's checks, the webhook's admissions. One rule for both roles.
package release

import (
	"context"
	"runtime/debug"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Quiet is how long no work must have run before the heap a burst freed is returned.
const Quiet = 30 * time.Second

// Gap is how many looks (of Quiet) at least come between two releases: a trickle of
// work (one check a minute) is a burst at every other look, and each release is a full
// collection (watcher.BenchmarkReleaseAt50k).
const Gap = 10

// Releaser returns to the OS the heap a burst of work freed, once none has run for
// Quiet. The collector keeps what the heap grew to in a burst, up to (1+GOGC/100) times
// the live heap, and the runtime returns memory only down to about that: at rest the
// process would hold it until the next burst. It costs one full collection per burst,
// at most one per Gap looks; at rest, or while work runs, nothing. It lowers the figure
// at rest, not the highest one in a burst (BENCHMARKS.md, "Memory in the number of
// workloads").
type Releaser struct {
	// Work counts the units of work begun; the role's workers add to it.
	Work *atomic.Uint64
	// Leader: run on the leader only (the watcher's checks); else on every replica.
	Leader bool
	quiet  time.Duration
	// gap is the fewest looks between two releases; cooldown the looks left of it.
	gap, cooldown int
	// release returns the freed heap (debug.FreeOSMemory).
	release func()
}

var _ manager.LeaderElectionRunnable = &Releaser{}

// New is a Releaser of the work counted by work.
func New(work *atomic.Uint64, leader bool) *Releaser {
	return &Releaser{Work: work, Leader: leader, quiet: Quiet, gap: Gap, release: debug.FreeOSMemory}
}

// NeedLeaderElection tells whether only the leader does the work counted.
func (r *Releaser) NeedLeaderElection() bool { return r.Leader }

// Start looks every quiet whether work ran since the last look and none since.
func (r *Releaser) Start(ctx context.Context) error {
	t := time.NewTicker(r.quiet)
	defer t.Stop()
	released, seen := r.Work.Load(), r.Work.Load()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		released, seen = r.tick(released, seen)
	}
}

// tick is one look: released is the count at the last release, seen the count at the
// last look. It releases when work ran since the last release and none since the last
// look and the last release was gap looks ago or more, and returns the counts for the
// next look.
func (r *Releaser) tick(released, seen uint64) (uint64, uint64) {
	now := r.Work.Load()
	if r.cooldown > 0 {
		r.cooldown--
	}
	if now != released && now == seen && r.cooldown == 0 {
		r.release()
		released, r.cooldown = now, r.gap
	}
	return released, now
}
