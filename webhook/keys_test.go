package webhook

import (
	"context"
	"fmt"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/stamp"
)

// The keys annotation is configstamp's: a client's value never stays, so that no one can
// make a later change cause (Event, notification) name keys that did not change.
func TestKeysAnnotationIsConfigstamps(t *testing.T) {
	st := expected(t, "1")
	d1 := stamp.ParseSources(st.SourcesAnnotation())["configmap/cfg"]
	forged := "configmap/cfg=" + d1 + ":k=ffffffff"

	// Someone else's update that keeps the template (an annotate): the stored keys stay.
	stored := withRecord(dep(stamped(st), "img:1", "cfg"), "img:1", st.Hash)
	real, _ := stamp.KeyDigests(stamp.Source{Kind: stamp.KindConfigMap, Name: "cfg", AllKeys: true}, cm("cfg", "1"), testNSKey)
	stored.Annotations[stamp.KeysAnnotation] = "configmap/cfg=" + d1 + ":" + real
	edit := stored.DeepCopy()
	edit.Annotations[stamp.KeysAnnotation] = forged
	o := admit(t, stamper(t, cm("cfg", "1")), request(t, admissionv1.Update, edit, stored), edit)
	if got, want := o.stored.Annotations[stamp.KeysAnnotation], stored.Annotations[stamp.KeysAnnotation]; got != want {
		t.Errorf("someone else's update left keys %q, want the stored %q", got, want)
	}

	// A CREATE carrying keys for a source whose own are not known (past 8 KiB): none.
	big := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"}, Data: map[string]string{}}
	for i := range 1000 {
		big.Data[fmt.Sprintf("key-%04d", i)] = "v"
	}
	bst, err := stamp.Compute(context.Background(), []stamp.Source{{Kind: stamp.KindConfigMap, Name: "cfg", AllKeys: true}},
		func(context.Context, string, string) (*corev1.ConfigMap, error) { return big, nil }, testNSKey)
	if err != nil {
		t.Fatal(err)
	}
	created := dep(nil, "img:1", "cfg")
	created.Annotations = map[string]string{stamp.KeysAnnotation: "configmap/cfg=" + stamp.ParseSources(bst.SourcesAnnotation())["configmap/cfg"] + ":key-0001=ffffffff"}
	o = admit(t, stamper(t, big), request(t, admissionv1.Create, created, nil), created)
	if o.stored.Spec.Template.Annotations[stamp.HashAnnotation] != bst.Hash {
		t.Fatalf("not stamped: %v", o.stored.Spec.Template.Annotations)
	}
	if got := o.stored.Annotations[stamp.KeysAnnotation]; got != "" {
		t.Errorf("a CREATE kept the client's keys %q", got)
	}
}
