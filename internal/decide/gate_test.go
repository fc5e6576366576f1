package decide

import (
	"errors"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/stamp"
)

func TestGate(t *testing.T) {
	refs := []stamp.Source{{Kind: stamp.KindConfigMap, Name: "app"}}
	boom := errors.New("boom")
	obj := func(skip string, deleting bool) metav1.Object {
		o := &metav1.ObjectMeta{Annotations: map[string]string{}}
		if skip != "" {
			o.Annotations[stamp.SkipAnnotation] = skip
		}
		if deleting {
			o.DeletionTimestamp = new(metav1.Now())
		}
		return o
	}
	for _, tc := range []struct {
		name       string
		entry      Entry
		scope      Scope
		scopeErr   error
		want       Stop
		wantErr    error
		scopeAsked bool
	}{
		{"in scope, consumes a source", Entry{Object: obj("", false), Refs: refs}, InScope, nil, Pass, nil, true},
		{"skipped", Entry{Object: obj("true", false), Refs: refs}, InScope, nil, StopSkipped, nil, false},
		{"skip not true", Entry{Object: obj("false", false), Refs: refs}, InScope, nil, Pass, nil, true},
		{"being deleted", Entry{Object: obj("", true), Refs: refs}, InScope, nil, StopDeleting, nil, false},
		{"skipped and being deleted: skipped", Entry{Object: obj("true", true), Refs: refs}, InScope, nil, StopSkipped, nil, false},
		{"kind not covered", Entry{Object: obj("", false), KindNotCovered: true, Refs: refs}, InScope, nil, StopKindNotCovered, nil, false},
		{"being deleted, kind not covered: deleting", Entry{Object: obj("", true), KindNotCovered: true, Refs: refs}, InScope, nil, StopDeleting, nil, false},
		{"scope unknown", Entry{Object: obj("", false), Refs: refs}, ScopeUnknown, nil, StopScopeUnknown, nil, true},
		{"not in scope", Entry{Object: obj("", false), Refs: refs}, OutOfScope, nil, StopNotInScope, nil, true},
		{"scope unreadable", Entry{Object: obj("", false), Refs: refs}, InScope, boom, StopScopeUnknown, boom, true},
		{"consumes nothing", Entry{Object: obj("", false)}, InScope, nil, StopNoSources, nil, true},
		{"over the source cap", Entry{Object: obj("", false), Refs: append(slices.Clone(refs), refs...), Options: stamp.Options{MaxSources: len(refs)}}, InScope, nil, StopTooManySources, nil, true},
		{"at the source cap", Entry{Object: obj("", false), Refs: refs, Options: stamp.Options{MaxSources: len(refs)}}, InScope, nil, Pass, nil, true},
		{"over the source cap, not in scope: not in scope", Entry{Object: obj("", false), Refs: append(slices.Clone(refs), refs...), Options: stamp.Options{MaxSources: len(refs)}}, OutOfScope, nil, StopNotInScope, nil, true},
		{"not in scope, consumes nothing: not in scope", Entry{Object: obj("", false)}, OutOfScope, nil, StopNotInScope, nil, true},
	} {
		asked := false
		got, err := Gate(tc.entry, func() (Scope, error) {
			asked = true
			return tc.scope, tc.scopeErr
		})
		if got != tc.want || !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) || asked != tc.scopeAsked {
			t.Errorf("%s: %q, %v (scope asked %v), want %q, %v (%v)", tc.name, got, err, asked, tc.want, tc.wantErr, tc.scopeAsked)
		}
	}
}
