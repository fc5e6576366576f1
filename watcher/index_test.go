package watcher

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// TestSourceIndexFollowsTheStore: the source index lookup (the informer's own index,
// addSourceIndex) finds every consumer by each way a pod template names a source, never
// one of another namespace, and follows the store as an informer changes it: an update
// that drops a reference, a delete seen only as a tombstone, a relist that replaces
// everything.
func TestSourceIndexFollowsTheStore(t *testing.T) {
	opts := stamp.Options{Secrets: true, CSISecrets: true}
	// As the informer keeps them: keyed by namespace/name, tombstones understood.
	deps := toolscache.NewIndexer(toolscache.DeletionHandlingMetaNamespaceKeyFunc, sourceIndexers(workload.Deployment, opts))
	crons := toolscache.NewIndexer(toolscache.DeletionHandlingMetaNamespaceKeyFunc, sourceIndexers(workload.CronJob, opts))
	byDeps, byCrons := lookupBy(deps), lookupBy(crons)
	names := func(lookup func(string) ([]client.Object, error), kind, ns, name string) []string {
		t.Helper()
		objs, err := lookup(indexKey(kind, ns, name))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, o := range objs {
			out = append(out, o.GetNamespace()+"/"+o.GetName())
		}
		slices.Sort(out)
		return out
	}
	want := func(lookup func(string) ([]client.Object, error), kind, ns, name string, w ...string) {
		t.Helper()
		if got := names(lookup, kind, ns, name); !slices.Equal(got, w) {
			t.Errorf("consumers of %s %s/%s: %v, want %v", kind, ns, name, got, w)
		}
	}
	cm := stamp.KindConfigMap
	add := func(s toolscache.Indexer, o client.Object) {
		t.Helper()
		if err := s.Add(o); err != nil {
			t.Fatal(err)
		}
	}

	add(deps, podDeployment("a", "volume", corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}}))
	add(deps, podDeployment("a", "projected", corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
			Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}}}}}}}}}))
	add(deps, podDeployment("a", "envfrom", corev1.PodSpec{InitContainers: []corev1.Container{{Name: "i", EnvFrom: []corev1.EnvFromSource{{
		ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}}}))
	add(deps, podDeployment("a", "keyref", corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{{Name: "E",
		ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "k"}}}}}}}))
	add(deps, podDeployment("a", "csi", corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
		CSI: &corev1.CSIVolumeSource{Driver: stamp.CSIDriver, VolumeAttributes: map[string]string{stamp.CSIClassAttribute: "vault"}}}}}}))
	extra := podDeployment("a", "extra", corev1.PodSpec{})
	extra.Annotations = map[string]string{stamp.ExtraSourcesAnnotation: "configmap/cfg, secret/sec"}
	add(deps, extra)
	// The same names in namespace b.
	add(deps, podDeployment("b", "volume", corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}}))
	cron := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "nightly"}}
	cron.Spec.JobTemplate.Spec.Template.Spec.Containers = []corev1.Container{{Name: "c", EnvFrom: []corev1.EnvFromSource{{
		ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}}
	add(crons, cron)

	want(byDeps, cm, "a", "cfg", "a/envfrom", "a/extra", "a/volume")
	want(byDeps, stamp.KindSecret, "a", "sec", "a/extra", "a/keyref", "a/projected")
	want(byDeps, stamp.KindSecretProviderClass, "a", "vault", "a/csi")
	want(byDeps, cm, "b", "cfg", "b/volume")
	want(byDeps, cm, "c", "cfg")
	want(byCrons, cm, "a", "nightly")
	want(byCrons, cm, "a", "cfg", "a/nightly")
	want(byCrons, cm, "b", "cfg")

	// An update that names another ConfigMap: found by the new one only.
	moved := podDeployment("a", "volume", corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "other"}}}}}})
	if err := deps.Update(moved); err != nil {
		t.Fatal(err)
	}
	want(byDeps, cm, "a", "cfg", "a/envfrom", "a/extra")
	want(byDeps, cm, "a", "other", "a/volume")

	// A delete the informer saw only on its relist: a tombstone.
	if err := deps.Delete(toolscache.DeletedFinalStateUnknown{Key: "a/envfrom", Obj: podDeployment("a", "envfrom", corev1.PodSpec{})}); err != nil {
		t.Fatal(err)
	}
	want(byDeps, cm, "a", "cfg", "a/extra")

	// A relist after a 410 replaces the store: the index is what the new list says.
	if err := deps.Replace([]any{moved, podDeployment("b", "volume", corev1.PodSpec{})}, "2"); err != nil {
		t.Fatal(err)
	}
	want(byDeps, cm, "a", "cfg")
	want(byDeps, cm, "a", "other", "a/volume")
	want(byDeps, cm, "b", "cfg")
	want(byDeps, stamp.KindSecret, "a", "sec")
}

// podDeployment is the Deployment ns/name whose pods have spec (a container added if it
// has none).
func podDeployment(ns, name string, spec corev1.PodSpec) *appsv1.Deployment {
	if len(spec.Containers) == 0 {
		spec.Containers = []corev1.Container{{Name: "c", Image: "img"}}
	}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	d.Spec.Template.Spec = spec
	return d
}
