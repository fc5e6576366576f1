package watcher

import (
	"context"
	"runtime/debug"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// releaseQuiet is how long no check must have run before the heap a burst of checks
// freed is returned to the OS.
const releaseQuiet = 30 * time.Second

// releaseGap is how many looks (of releaseQuiet) at least come between two releases: a
// trickle of checks (one every minute or so) is a burst at every other look, and each
// release is a full collection of the whole cache (BenchmarkReleaseAt50k).
const releaseGap = 10

// releaser returns to the OS the heap a burst of checks freed (the initial sync and its
// backlog, a fan-out, a re-check pass), once no check has run for quiet.
// The collector keeps what the heap grew to in a burst, up to (1+GOGC/100) times the
// live heap, mostly the cache: at rest the process would hold it until the next burst.
// It costs one full collection per burst, at most one per gap looks; at rest, or while
// checks run, nothing. It
// lowers the figure at rest, not the highest one in a burst (BENCHMARKS.md, "Memory in
// the number of workloads").
type releaser struct {
	// checks counts the checks begun and the re-check passes; the watcher's
	// reconcilers add to it.
	checks *atomic.Uint64
	quiet  time.Duration
	// gap is the fewest looks between two releases; cooldown the looks left of it.
	gap, cooldown int
	// release returns the freed heap (debug.FreeOSMemory).
	release func()
}

var _ manager.LeaderElectionRunnable = &releaser{}

// NeedLeaderElection is true: only the leader checks.
func (r *releaser) NeedLeaderElection() bool { return true }

// Start looks every quiet whether checks ran since the last look and none since.
func (r *releaser) Start(ctx context.Context) error {
	t := time.NewTicker(r.quiet)
	defer t.Stop()
	released, seen := r.checks.Load(), r.checks.Load()
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
// last look. It releases when checks ran since the last release and none since the
// last look and the last release was gap looks ago or more, and returns the counts for
// the next look.
func (r *releaser) tick(released, seen uint64) (uint64, uint64) {
	now := r.checks.Load()
	if r.cooldown > 0 {
		r.cooldown--
	}
	if now != released && now == seen && r.cooldown == 0 {
		r.release()
		released, r.cooldown = now, r.gap
	}
	return released, now
}

func newReleaser(checks *atomic.Uint64) *releaser {
	return &releaser{checks: checks, quiet: releaseQuiet, gap: releaseGap, release: debug.FreeOSMemory}
}
