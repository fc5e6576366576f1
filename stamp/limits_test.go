package stamp

import (
	"strings"
	"testing"
)

func TestAnnotationsFit(t *testing.T) {
	big := strings.Repeat("x", AnnotationSizeLimit-len("a")-len("b")) // "a": big, at the limit with "b" set to ""
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		set         map[string]string
		want        bool
	}{
		{"empty", nil, nil, true},
		{"at the limit", map[string]string{"a": big + "b"}, nil, true},
		{"one byte over", map[string]string{"a": big + "bc"}, nil, false},
		{"a set value counts", map[string]string{"a": big}, map[string]string{"b": "c"}, false},
		{"a set value replaces the stored one", map[string]string{"a": big, "b": "much longer"}, map[string]string{"b": "c"}, false},
		{"replacing with a shorter value fits", map[string]string{"a": big[1:], "b": "much longer"}, map[string]string{"b": "c"}, true},
		{"an empty value removes the key", map[string]string{"a": big + "b", "long-key": "v"}, map[string]string{"long-key": ""}, true},
		{"keys count", map[string]string{big + "ab": ""}, nil, true},
		{"keys count, one over", map[string]string{big + "abc": ""}, nil, false},
	} {
		if got := AnnotationsFit(tc.annotations, tc.set); got != tc.want {
			t.Errorf("%s: AnnotationsFit = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestTemplateAnnotations(t *testing.T) {
	if got := TemplateAnnotations("", "configmap/a=1", "now"); got[SourcesAnnotation] != "" || got[HashAnnotation] != "" || got[RestartedAnnotation] != "now" {
		t.Errorf("no hash: %v, want hash and sources removed", got)
	}
	if got := TemplateAnnotations("h", "s", ""); len(got) != 2 || got[HashAnnotation] != "h" || got[SourcesAnnotation] != "s" {
		t.Errorf("%v, want hash and sources only", got)
	}
}

func TestAnnotationsFitWithin(t *testing.T) {
	at := map[string]string{"a": strings.Repeat("x", AnnotationSizeLimit-CauseHeadroom-len("a"))} // CauseHeadroom bytes left
	if !AnnotationsFitWithin(at, nil, CauseHeadroom) || AnnotationsFitWithin(at, map[string]string{"b": ""}, CauseHeadroom+1) {
		t.Error("room counted wrong")
	}
	if AnnotationsFitWithin(at, map[string]string{"b": "c"}, CauseHeadroom) || !AnnotationsFit(at, map[string]string{"b": "c"}) {
		t.Error("a set value within the headroom: fits the limit, not the headroom")
	}
}
