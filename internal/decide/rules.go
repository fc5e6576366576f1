package decide

import (
	"github.com/configstamp/configstamp/stamp"
)

// The rules the webhook applies at admission and the watcher at a check, kept here once.

// Basis is the config hash a workload's pods are judged to run: its record's when the
// record is valid for its template (stamp.ObservedFor) and certain for its sources
// (Observed.Certain), else its stamp's (stored; "" when unstamped). certain tells which.
func Basis(stored string, rec stamp.Observed, recValid bool, srcs []stamp.Source) (basis string, certain bool) {
	if recValid && rec.Certain(srcs) {
		return rec.Hash, true
	}
	return stored, false
}

// HeldBy is the required config missing from want that keeps a workload from rolling off
// basis: new pods could not start (nil: none is missing, or nothing would roll).
func HeldBy(basis string, want stamp.Stamp) []string {
	if basis == want.Hash {
		return nil
	}
	return want.Unmet()
}

// StampFits reports whether want's stamp (with a restart time when restart) fits in the
// pod template's annotations, within the API server's limit.
func StampFits(annotations map[string]string, want stamp.Stamp, restart bool) bool {
	return stamp.AnnotationsFit(annotations, stamp.TemplateAnnotations(want.Hash, want.SourcesAnnotation(), RestartPlaceholder(restart)))
}

// ChangedBack reports whether config want, other than the stamp's (stored), is what a
// certain record says the pods run: it changed back since the check that decided to
// roll, and nothing needs to.
func ChangedBack(stored, want string, certain bool, recorded string) bool {
	return certain && want == recorded && want != stored
}

// RecordBehind is the config a workload's pods not yet replaced keep running, for the
// record the webhook writes with a new stamp want (stamp.Observed.Behind; "": none). A
// workload whose controller replaces pods only when they are deleted or above a
// partition (partial: workload.Kind.Behind) keeps its older pods after a new template,
// so the record says what they run: the oldest config its record already had behind,
// else what the stored template's pods run (its record's, old, when valid for the stored
// template: oldOK; else the stored stamp), unless that is want. None on a CREATE (every
// pod is new), for other workloads, or when not known (unstamped, no record).
func RecordBehind(partial, create bool, old stamp.Observed, oldOK bool, storedHash, want string) string {
	if !partial || create {
		return ""
	}
	ran := storedHash
	if oldOK {
		if old.Behind != "" && old.Behind != want {
			return old.Behind
		}
		ran = old.Hash
	}
	if ran == want {
		return ""
	}
	return ran
}

// CaughtUp reports whether a record's Behind can go: its controller's status shows no
// pod on an older template (behind, workload.Kind.Behind, is 0). The watcher then writes
// the record without it.
func CaughtUp(rec stamp.Observed, behind int32) bool { return rec.Behind != "" && behind == 0 }
