package decide

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/stamp"
)

// Stop names the entry check that leaves a workload alone (Pass: none does).
type Stop string

// Entry checks, in the order Gate applies them.
const (
	Pass Stop = ""
	// StopSkipped: annotated configstamp.io/skip=true.
	StopSkipped Stop = "skipped"
	// StopDeleting: being deleted.
	StopDeleting Stop = "deleting"
	// StopKindNotCovered: the registration does not send its kind's admissions.
	StopKindNotCovered Stop = "kind-not-covered"
	// StopScopeUnknown: whether it is in scope is not known.
	StopScopeUnknown Stop = "unknown-scope"
	// StopNotInScope: neither its namespace nor itself opts in.
	StopNotInScope Stop = "not-in-scope"
	// StopNoSources: it consumes nothing.
	StopNoSources Stop = "no-sources"
	// StopTooManySources: it consumes more sources than the cap (stamp.Options.SourceCap).
	StopTooManySources Stop = "too-many-sources"
)

// Scope is whether the registration sends a workload's admissions.
type Scope int

const (
	OutOfScope Scope = iota
	InScope
	// ScopeUnknown: its namespace could not be read, and it does not opt in by its
	// own label.
	ScopeUnknown
)

// Entry is what the entry checks read of a workload with a pod template of its own.
type Entry struct {
	Object metav1.Object
	// KindNotCovered: the registration shows its kind is not covered.
	KindNotCovered bool
	// Refs are the sources it consumes.
	Refs []stamp.Source
	// Options are those Refs were found under (their source cap).
	Options stamp.Options
}

// Gate applies the entry checks of the watcher, explain and impact to e: the first that
// leaves it alone, else Pass. scope is called only when the checks before it pass; when
// it fails, the scope is not known (StopScopeUnknown) and its error is returned. The
// webhook checks skip, its scope and the source cap itself, before any read, and answers
// a workload being deleted or consuming nothing as any other.
func Gate(e Entry, scope func() (Scope, error)) (Stop, error) {
	switch {
	case stamp.IsTrue(e.Object.GetAnnotations()[stamp.SkipAnnotation]):
		return StopSkipped, nil
	case e.Object.GetDeletionTimestamp() != nil:
		return StopDeleting, nil
	case e.KindNotCovered:
		return StopKindNotCovered, nil
	}
	s, err := scope()
	switch {
	case err != nil:
		return StopScopeUnknown, err
	case s == ScopeUnknown:
		return StopScopeUnknown, nil
	case s != InScope:
		return StopNotInScope, nil
	case len(e.Refs) == 0:
		return StopNoSources, nil
	case e.Options.OverCap(e.Refs):
		return StopTooManySources, nil
	}
	return Pass, nil
}
