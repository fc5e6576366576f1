package decide

import (
	"slices"
	"strings"
	"testing"

	"github.com/configstamp/configstamp/stamp"
)

func TestBasis(t *testing.T) {
	cms := []stamp.Source{{Kind: stamp.KindConfigMap, Name: "app"}}
	withSecret := append(slices.Clone(cms), stamp.Source{Kind: stamp.KindSecret, Name: "db"})
	rec := stamp.Observed{Hash: "rec"}
	for _, tc := range []struct {
		name        string
		stored      string
		rec         stamp.Observed
		valid       bool
		srcs        []stamp.Source
		want        string
		wantCertain bool
	}{
		{"a valid record is the basis", "stamp", rec, true, cms, "rec", true},
		{"a record for another template is not", "stamp", rec, false, cms, "stamp", false},
		{"nor one made while Secrets counted otherwise", "stamp", rec, true, withSecret, "stamp", false},
		{"one made with Secrets, for a workload with one", "stamp", stamp.Observed{Hash: "rec", Secrets: true}, true, withSecret, "rec", true},
		{"unstamped without a record: none", "", stamp.Observed{}, false, cms, "", false},
		{"unstamped with a record", "", rec, true, cms, "rec", true},
	} {
		got, certain := Basis(tc.stored, tc.rec, tc.valid, tc.srcs)
		if got != tc.want || certain != tc.wantCertain {
			t.Errorf("%s: %q (certain %v), want %q (%v)", tc.name, got, certain, tc.want, tc.wantCertain)
		}
	}
}

func TestHeldBy(t *testing.T) {
	missing := stamp.Digest{Kind: stamp.KindConfigMap, Name: "app", Missing: true, Unmet: "configmap/app is missing"}
	optional := stamp.Digest{Kind: stamp.KindConfigMap, Name: "opt", Missing: true}
	for _, tc := range []struct {
		name  string
		basis string
		want  stamp.Stamp
		held  []string
	}{
		{"required config missing, the config differs", "old", want("new", missing), []string{"configmap/app is missing"}},
		{"the basis is the config as it is: nothing rolls", "new", want("new", missing), nil},
		{"only optional config missing", "old", want("new", optional), nil},
		{"nothing missing", "old", want("new"), nil},
	} {
		if got := HeldBy(tc.basis, tc.want); !slices.Equal(got, tc.held) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.held)
		}
	}
}

func TestStampFits(t *testing.T) {
	st := want(strings.Repeat("a", 64), stamp.Digest{Kind: stamp.KindConfigMap, Name: "app"})
	size := len(stamp.HashAnnotation) + 64 + len(stamp.SourcesAnnotation) + len(st.SourcesAnnotation())
	restart := len(stamp.RestartedAnnotation) + len(RestartPlaceholder(true))
	pad := func(room int) map[string]string {
		return map[string]string{"pad": strings.Repeat("x", stamp.AnnotationSizeLimit-len("pad")-room)}
	}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		restart     bool
		fits        bool
	}{
		{"room for the stamp", pad(size), false, true},
		{"a byte short", pad(size - 1), false, false},
		{"room for the stamp, not the restart time", pad(size), true, false},
		{"room for both", pad(size + restart), true, true},
		{"the stamp it replaces counts as gone", map[string]string{stamp.HashAnnotation: strings.Repeat("b", 64), "pad": pad(size)["pad"]}, false, true},
	} {
		if got := StampFits(tc.annotations, st, tc.restart); got != tc.fits {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.fits)
		}
	}
}

func TestChangedBack(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		stored, want, recorded string
		certain, back          bool
	}{
		{"the config is what the record says the pods run", "stamp", "rec", "rec", true, true},
		{"a record that is not certain says nothing", "stamp", "rec", "rec", false, false},
		{"the config is what the stamp names", "rec", "rec", "rec", true, false},
		{"the config is neither", "stamp", "new", "rec", true, false},
		{"unstamped, the pods run it per their record", "", "rec", "rec", true, true},
	} {
		if got := ChangedBack(tc.stored, tc.want, tc.certain, tc.recorded); got != tc.back {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.back)
		}
	}
}

func TestRecordBehind(t *testing.T) {
	rec := stamp.Observed{Hash: "a"}
	for _, tc := range []struct {
		name            string
		partial, create bool
		old             stamp.Observed
		oldOK           bool
		stored, want    string
		behind          string
	}{
		{"not partial: every pod is replaced", false, false, rec, true, "a", "b", ""},
		{"a CREATE: every pod is new", true, true, stamp.Observed{}, false, "", "b", ""},
		{"partial: its record's config stays behind", true, false, rec, true, "x", "b", "a"},
		{"partial, no record: its stamp's", true, false, stamp.Observed{}, false, "s", "b", "s"},
		{"partial, unstamped, no record: not known", true, false, stamp.Observed{}, false, "", "b", ""},
		{"partial, config unchanged: nothing behind", true, false, rec, true, "a", "a", ""},
		{"partial, already behind: the oldest stays", true, false, stamp.Observed{Hash: "b", Behind: "a"}, true, "b", "c", "a"},
		{"partial, back to what the oldest run: the newer behind", true, false, stamp.Observed{Hash: "b", Behind: "a"}, true, "b", "a", "b"},
	} {
		if got := RecordBehind(tc.partial, tc.create, tc.old, tc.oldOK, tc.stored, tc.want); got != tc.behind {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.behind)
		}
	}
}

func TestCaughtUp(t *testing.T) {
	behind := stamp.Observed{Hash: "b", Behind: "a"}
	switch {
	case !CaughtUp(behind, 0):
		t.Error("no pod left behind: caught up")
	case CaughtUp(behind, 1):
		t.Error("a pod left behind: not caught up")
	case CaughtUp(stamp.Observed{Hash: "b"}, 0):
		t.Error("nothing behind in the record: nothing to catch up")
	}
}
