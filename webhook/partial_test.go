package webhook

import (
	"context"
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/stamp"
)

// A nudge of an OnDelete StatefulSet stamps its template with the current config, and
// its record says the pods still on the older template run what they ran (Behind); a
// RollingUpdate one's record names none; so does an OnDelete one's CREATE.
func TestHandlePartialRecordsBehind(t *testing.T) {
	old, cur := expected(t, "1"), expected(t, "2")
	sts := func(strategy appsv1.StatefulSetUpdateStrategyType) *appsv1.StatefulSet {
		d := dep(stamped(old), "img", "cfg")
		s := &appsv1.StatefulSet{ObjectMeta: d.ObjectMeta, Spec: appsv1.StatefulSetSpec{Template: d.Spec.Template,
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: strategy}}}
		s.Annotations = map[string]string{stamp.ObservedAnnotation: stamp.Observed{Hash: old.Hash, Template: stamp.TemplateFingerprint(&s.Spec.Template),
			Key: stamp.KeyFingerprint(testKey())}.String()}
		return s
	}
	raw := func(s *appsv1.StatefulSet) runtime.RawExtension {
		if s == nil {
			return runtime.RawExtension{}
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	for _, tc := range []struct {
		name     string
		strategy appsv1.StatefulSetUpdateStrategyType
		op       admissionv1.Operation
		behind   string
	}{
		{"OnDelete nudge", appsv1.OnDeleteStatefulSetStrategyType, admissionv1.Update, old.Hash},
		{"RollingUpdate nudge", appsv1.RollingUpdateStatefulSetStrategyType, admissionv1.Update, ""},
		{"OnDelete create", appsv1.OnDeleteStatefulSetStrategyType, admissionv1.Create, ""},
	} {
		stored := sts(tc.strategy)
		obj := stored.DeepCopy()
		obj.Annotations[stamp.NudgeAnnotation] = testNudge
		if tc.op == admissionv1.Create {
			stored = nil
			obj = sts(tc.strategy)
			obj.Annotations = nil
			obj.Spec.Template.Annotations = nil
		}
		resp := stamper(t, cm("cfg", "2")).Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			UID: "uid", Kind: metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"},
			Operation: tc.op, Namespace: "ns", Name: "app", Object: raw(obj), OldObject: raw(stored)}})
		var rec stamp.Observed
		found := false
		for _, p := range resp.Patches {
			var v string
			switch val := p.Value.(type) {
			case string:
				v = val
			case map[string]string:
				v = val[stamp.ObservedAnnotation]
			}
			if r, ok := stamp.ParseObserved(v); ok {
				rec, found = r, true
			}
		}
		if !found || rec.Hash != cur.Hash || rec.Behind != tc.behind {
			t.Errorf("%s: record %+v (found %v) in %+v, want %s behind %q", tc.name, rec, found, resp.Patches, cur.Hash, tc.behind)
		}
	}
}
