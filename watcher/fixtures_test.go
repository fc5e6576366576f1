package watcher

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// The fixture the watcher's reconciler tests share: an opted-in namespace "ns", a
// ConfigMap "ns/cfg", and a Deployment "ns/app" that consumes it by a volume.

// testKey is the installation key of the tests.
func testKey() []byte { return []byte("0123456789abcdef0123456789abcdef") }

// appKey is the key of the Deployment cfgDeployment returns.
var appKey = types.NamespacedName{Namespace: "ns", Name: "app"}

// testScheme is a scheme with the client-go (built-in) types.
func testScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	return scheme
}

// optedInNamespace is the namespace "ns", labelled for configstamp to stamp its workloads.
func optedInNamespace() *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{stamp.InjectLabel: stamp.InjectValue}}}
}

// cfgMap is the ConfigMap "ns/cfg" with the value v under the key "k".
func cfgMap(v string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"}, Data: map[string]string{"k": v}}
}

// cfgDeployment is the Deployment "ns/app": one container, and the ConfigMap "cfg" as a
// volume; no annotations.
func cfgDeployment() *appsv1.Deployment {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app"}}
	d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "c", Image: "img"}}
	d.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}
	return d
}

// newTestReconciler is the watcher of Deployments with the default flags (the opt-in
// label as its scope) on c, and the recorder of its Events.
func newTestReconciler(t *testing.T, c client.Client) (*workloadReconciler, *events.FakeRecorder) {
	t.Helper()
	sc, err := scope.New(stamp.InjectLabel, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := events.NewFakeRecorder(100)
	return &workloadReconciler{kind: workload.Deployment, client: c, live: c, recorder: rec, scope: sc,
		config: &configread.Reader{Client: c, Key: testKey}}, rec
}

// staleStamp is a config hash no config has: the stamp and the record of staleDeployment.
var staleStamp = strings.Repeat("a", 64)

// staleDeployment is cfgDeployment stamped, and recorded as running, config that is not
// cfg's: a check rolls it.
func staleDeployment() *appsv1.Deployment {
	d := cfgDeployment()
	d.Spec.Template.Annotations = map[string]string{stamp.HashAnnotation: staleStamp}
	d.Annotations = map[string]string{stamp.ObservedAnnotation: stamp.Observed{Hash: staleStamp, Template: stamp.TemplateFingerprint(&d.Spec.Template)}.String()}
	return d
}

// stripMarker applies a patch as a webhook that takes configstamp's nudge marker off and
// changes nothing else would.
func stripMarker(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := c.Patch(ctx, obj, patch, opts...); err != nil {
		return err
	}
	a := obj.GetAnnotations()
	delete(a, stamp.NudgeAnnotation)
	obj.SetAnnotations(a)
	return c.Update(ctx, obj)
}
