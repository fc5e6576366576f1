package watcher

import (
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestWorkloadStateForgetKeepsAPendingTrigger(t *testing.T) {
	var s workloadStates
	key := types.NamespacedName{Namespace: "ns", Name: "app"}
	s.addTrigger(key, trigger{changed: true})
	s.countBypass(key)
	s.countUnread(key)
	s.markOversize(key)
	s.rolled(key, time.Hour)
	s.forget(key)
	if got := s.peek(key); got != (workloadState{trigger: trigger{changed: true}}) {
		t.Fatalf("after forget: %+v, want only the pending trigger", got)
	}
	if tr := s.takeTrigger(key); !tr.changed {
		t.Fatalf("trigger %+v, want the one added", tr)
	}
	if len(s.m) != 0 {
		t.Fatalf("%d states kept after the trigger was taken, want none", len(s.m))
	}
}

func TestWorkloadStateEmptyIsDropped(t *testing.T) {
	var s workloadStates
	key := types.NamespacedName{Namespace: "ns", Name: "app"}
	s.countBypass(key)
	s.countUnread(key)
	s.resetBypasses(key)
	s.markOversize(key)
	s.clearOversize(key, s.oversizeMark(key))
	s.addTrigger(key, trigger{event: true})
	s.takeTrigger(key)
	if len(s.m) != 0 {
		t.Fatalf("states kept: %v", s.m)
	}
}

func TestWorkloadStateOversizeMark(t *testing.T) {
	var s workloadStates
	key := types.NamespacedName{Namespace: "ns", Name: "app"}
	before := s.oversizeMark(key)
	s.markOversize(key) // the check marks it again
	s.clearOversize(key, before)
	if !s.isOversize(key) {
		t.Fatal("a check cleared the mark it set itself")
	}
	s.clearOversize(key, s.oversizeMark(key))
	if s.isOversize(key) {
		t.Fatal("a check that did not mark it again did not clear the mark")
	}
}

func TestWorkloadStateRolledForgetsOldRollouts(t *testing.T) {
	var s workloadStates
	for i := range 300 {
		s.rolled(types.NamespacedName{Namespace: "ns", Name: string(rune('a' + i))}, time.Nanosecond)
	}
	time.Sleep(time.Millisecond)
	last := types.NamespacedName{Namespace: "ns", Name: "last"}
	s.rolled(last, time.Nanosecond)
	if len(s.m) > 258 {
		t.Fatalf("%d rollouts remembered, want old ones forgotten", len(s.m))
	}
	if s.peek(last).lastRoll.IsZero() {
		t.Fatal("the latest rollout was forgotten")
	}
}

// TestWorkloadStateConcurrent runs what the event handlers, the hand-offs and the checks
// do at once (for -race).
func TestWorkloadStateConcurrent(t *testing.T) {
	var s workloadStates
	key := types.NamespacedName{Namespace: "ns", Name: "app"}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 200 {
				s.addTrigger(key, trigger{handoff: true})
				s.isOversize(key)
				s.changedSince(key)
				s.countBypass(key)
				s.countUnread(key)
				s.markOversize(key)
				s.clearOversize(key, s.oversizeMark(key))
				s.rolled(key, time.Second)
				s.untilNextRoll(key, time.Second)
				s.resetBypasses(key)
				s.takeTrigger(key)
				s.forget(key)
			}
		})
	}
	wg.Wait()
}

// TestCheckedFingerprintApart: a workload whose only state is its fingerprint at its
// last finished check (after the initial list, nearly every one) keeps no workloadState
// (BENCHMARKS.md, "Memory in the number of workloads"); the re-check reads the same
// fingerprint, and a workload that is gone keeps none.
func TestCheckedFingerprintApart(t *testing.T) {
	var s workloadStates
	keys := []types.NamespacedName{{Namespace: "ns", Name: "a"}, {Namespace: "ns", Name: "b"}, {Namespace: "other", Name: "a"}}
	for i, k := range keys {
		s.setChecked(k, uint64(i))
	}
	if len(s.m) != 0 {
		t.Fatalf("%d workload states kept for fingerprints alone, want none", len(s.m))
	}
	for i, k := range keys {
		if got := s.checkedAs(k); got != uint64(i) {
			t.Fatalf("checkedAs(%s) = %d, want %d", k, got, i)
		}
	}
	s.forget(keys[0])
	if got := s.checkedAs(keys[0]); got == 0 {
		t.Fatal("a forgotten workload still has its fingerprint")
	}
	if got := s.checkedAs(keys[1]); got != 1 {
		t.Fatalf("checkedAs(%s) = %d after another was forgotten, want 1", keys[1], got)
	}
}
