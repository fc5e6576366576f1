package webhook

import (
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// The smallest ops that make annotations hold what is wanted, at the metadata they
// belong to, whatever state it is in.
func TestAnnotationsSet(t *testing.T) {
	for _, tc := range []struct {
		name  string
		whole bool
		m     map[string]string
		want  []map[string]string // applied in turn
		ops   string
	}{
		{"add to existing annotations, in key order", false, map[string]string{"x": "y"}, []map[string]string{{"b": "2", "a": "1"}},
			`[{"op":"add","path":"/m/annotations/a","value":"1"},{"op":"add","path":"/m/annotations/b","value":"2"}]`},
		{"no annotations: one map", false, nil, []map[string]string{{"a": "1", "b": ""}},
			`[{"op":"add","path":"/m/annotations","value":{"a":"1"}}]`},
		{"no metadata worth keeping: it whole", true, nil, []map[string]string{{"a": "1"}},
			`[{"op":"add","path":"/m","value":{"annotations":{"a":"1"}}}]`},
		{"removals first", false, map[string]string{"a": "0", "z": "0"}, []map[string]string{{"a": "1", "z": ""}},
			`[{"op":"remove","path":"/m/annotations/z"},{"op":"add","path":"/m/annotations/a","value":"1"}]`},
		{"nothing to do", false, map[string]string{"a": "1"}, []map[string]string{{"a": "1", "b": ""}}, `null`},
		{"keys escaped (RFC 6901)", false, map[string]string{"a~b/c": "0"}, []map[string]string{{"a~b/c": "", "d/e": "1"}},
			`[{"op":"remove","path":"/m/annotations/a~0b~1c"},{"op":"add","path":"/m/annotations/d~1e","value":"1"}]`},
		{"a second set sees the first's map", false, nil, []map[string]string{{"a": "1"}, {"b": "2"}},
			`[{"op":"add","path":"/m/annotations","value":{"a":"1"}},{"op":"add","path":"/m/annotations/b","value":"2"}]`},
		{"a second set sees the first's metadata", true, nil, []map[string]string{{"a": "1"}, {"a": ""}},
			`[{"op":"add","path":"/m","value":{"annotations":{"a":"1"}}},{"op":"remove","path":"/m/annotations/a"}]`},
		{"a second set sees the first's removal", false, map[string]string{"a": "1"}, []map[string]string{{"a": ""}, {"a": ""}},
			`[{"op":"remove","path":"/m/annotations/a"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &annotationsAt{base: "/m", whole: tc.whole, m: tc.m}
			var ops []any
			for _, w := range tc.want {
				for _, op := range a.set(w) {
					ops = append(ops, op)
				}
			}
			b, err := json.Marshal(ops)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.ops {
				t.Errorf("ops %s, want %s", b, tc.ops)
			}
		})
	}
}

// A plan's patch: the stripped annotations, the template's at the kind's path, then the
// record and the cause.
func TestPatchOrder(t *testing.T) {
	d := marked(dep(map[string]string{"x": "y"}, "img", "cfg"), "true")
	in, bad := decodeInput(&Stamper{}, workload.Deployment, request(t, admissionv1.Create, d, nil))
	if bad != nil {
		t.Fatal(bad)
	}
	p := &plan{strip: []string{stamp.NudgeAnnotation}, template: map[string]string{stamp.HashAnnotation: "h"},
		metadata: map[string]string{stamp.ChangeCauseAnnotation: "c", stamp.ObservedAnnotation: "r"}}
	b, err := json.Marshal(in.patch(p))
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"op":"remove","path":"/metadata/annotations/configstamp.io~1nudge"},` +
		`{"op":"add","path":"/spec/template/metadata/annotations/configstamp.io~1config-hash","value":"h"},` +
		`{"op":"add","path":"/metadata/annotations/configstamp.io~1observed","value":"r"},` +
		`{"op":"add","path":"/metadata/annotations/kubernetes.io~1change-cause","value":"c"}]`
	if string(b) != want {
		t.Errorf("patch %s, want %s", b, want)
	}
	if d.Annotations[stamp.NudgeAnnotation] != "true" || in.annotations[stamp.NudgeAnnotation] != "true" {
		t.Error("the patch changed the incoming annotations")
	}
}
