package watcher

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/configstamp/configstamp/stamp"
)

// TestReportTooMany: a workload over the source cap is reported (its TooManySources
// Event) the first time, again when its set of sources changes, and else at most every
// tooManyEvery, however often it is checked.
func TestReportTooMany(t *testing.T) {
	var s workloadStates
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	set1 := sourceSet([]stamp.Source{{Kind: "ConfigMap", Name: "x"}, {Kind: "ConfigMap", Name: "y"}})
	set2 := sourceSet([]stamp.Source{{Kind: "ConfigMap", Name: "x"}, {Kind: "ConfigMap", Name: "z"}})
	// The encoding tells names apart that plain concatenation would not.
	if sourceSet([]stamp.Source{{Kind: "ConfigMap", Name: "ab"}}) == sourceSet([]stamp.Source{{Kind: "ConfigMap", Name: "a"}, {Kind: "", Name: "b"}}) {
		t.Error("two different source lists share a set")
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, step := range []struct {
		key  types.NamespacedName
		set  string
		at   time.Duration
		want bool
	}{
		{a, set1, 0, true},
		{a, set1, time.Second, false}, // every check after: nothing
		{a, set1, 30 * time.Minute, false},
		{b, set1, 30 * time.Minute, true}, // another workload: its own
		{a, set2, 31 * time.Minute, true}, // another set of sources
		{a, set2, 90 * time.Minute, false},
		{a, set2, 31*time.Minute + tooManyEvery, true}, // an hour after the last report
		{a, set2, 32*time.Minute + tooManyEvery, false},
	} {
		if got := s.reportTooMany(step.key, step.set, t0.Add(step.at)); got != step.want {
			t.Errorf("step %d (%s at %v): reported %v, want %v", i, step.key.Name, step.at, got, step.want)
		}
	}
	// A deleted workload's memory goes with it.
	s.forget(a)
	if !s.reportTooMany(a, set2, t0.Add(33*time.Minute+tooManyEvery)) {
		t.Error("a workload forgotten (deleted) and made again was not reported")
	}
}
