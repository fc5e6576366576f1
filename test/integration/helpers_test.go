package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/hashdoc"
	"github.com/configstamp/configstamp/test/internal/configmaps"
	"github.com/configstamp/configstamp/test/internal/deployments"
)

var bg = context.Background()

func getDeployment(t *testing.T, ns, name string) *appsv1.Deployment {
	t.Helper()
	return deployments.Get(t, k8s, ns, name)
}

func configMap(ns, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(bg, obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// setData replaces one key of a ConfigMap (merge patch: no conflicts).
func setData(t *testing.T, ns, name, key, value string) {
	t.Helper()
	configmaps.SetData(t, k8s, ns, name, key, value)
}

func getConfigMap(t *testing.T, ns, name string) *corev1.ConfigMap {
	t.Helper()
	return configmaps.Get(t, k8s, ns, name)
}

// podWithVolumes is a pod spec mounting each named ConfigMap whole (optional, so the
// pod could start without it).
func podWithVolumes(names ...string) corev1.PodSpec {
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}
	for _, n := range names {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "cfg-" + n, VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: n}, Optional: ptr.To(true)}}})
		spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "cfg-" + n, MountPath: "/etc/" + n})
	}
	return spec
}

func deployment(name string, spec corev1.PodSpec) *appsv1.Deployment {
	return deployments.New("", name, 1, spec)
}

func createDeployment(t *testing.T, ns, name string, spec corev1.PodSpec) *appsv1.Deployment {
	t.Helper()
	d := deployment(name, spec)
	d.Namespace = ns
	create(t, d)
	return d
}

func hashOf(d *appsv1.Deployment) string { return deployments.Hash(d) }

// rollsOnce waits until the Deployment carries want as its config hash, asserts that
// this took exactly one new generation since before, and that no second one follows.
func rollsOnce(t *testing.T, before *appsv1.Deployment, want string) *appsv1.Deployment {
	t.Helper()
	got := waitStamp(t, before.Namespace, before.Name, want)
	if got.Generation != before.Generation+1 {
		t.Fatalf("%s: generation %d -> %d, want exactly one more", before.Name, before.Generation, got.Generation)
	}
	keepsGeneration(t, settle, before.Namespace, before.Name, got.Generation)
	return got
}

// waitStamp waits until the Deployment carries want as its config hash.
func waitStamp(t *testing.T, ns, name, want string) *appsv1.Deployment {
	t.Helper()
	return deployments.WaitStamp(t, k8s, 30*time.Second, ns, name, want)
}

// unchanged asserts over period that the Deployment keeps its generation and
// resourceVersion: nothing was written at all.
func unchanged(t *testing.T, period time.Duration, before *appsv1.Deployment) {
	t.Helper()
	framework.Consistently(t, period, "deployment "+before.Name+" untouched", func() error {
		d := getDeployment(t, before.Namespace, before.Name)
		if d.Generation != before.Generation || d.ResourceVersion != before.ResourceVersion {
			return fmt.Errorf("generation %d -> %d, resourceVersion %s -> %s",
				before.Generation, d.Generation, before.ResourceVersion, d.ResourceVersion)
		}
		return nil
	})
}

// keepsGeneration asserts over period that the Deployment stays at generation gen.
func keepsGeneration(t *testing.T, period time.Duration, ns, name string, gen int64) {
	t.Helper()
	framework.Consistently(t, period, "generation of "+name, func() error {
		if g := getDeployment(t, ns, name).Generation; g != gen {
			return fmt.Errorf("generation %d, want %d", g, gen)
		}
		return nil
	})
}

// docSource is what the test knows a pod sees of one ConfigMap.
type docSource struct {
	name string
	keys []string // nil: all keys
}

// docHash recomputes the config hash from the encoding written in docs/hash.md,
// independently of the stamp package, from the ConfigMaps as they are now.
func docHash(t *testing.T, ns string, srcs ...docSource) string {
	t.Helper()
	var doc []hashdoc.Source
	for _, s := range srcs {
		doc = append(doc, hashdoc.Source{Name: s.name, Keys: s.keys})
	}
	return hashdoc.Hash(doc, configmaps.Lookup(t, k8s, ns), framework.HashKey, ns)
}

// digests parses a sources annotation into source -> digest.
func digests(ann string) map[string]string {
	m := map[string]string{}
	for _, e := range strings.Split(ann, ",") {
		if k, v, ok := strings.Cut(e, "="); ok {
			m[k] = v
		}
	}
	return m
}

// podWithItems mounts the listed keys of one ConfigMap (required).
func podWithItems(name string, keys ...string) corev1.PodSpec {
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1",
		VolumeMounts: []corev1.VolumeMount{{Name: "cfg", MountPath: "/etc/cfg"}}}}}
	v := corev1.Volume{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}
	for _, k := range keys {
		v.ConfigMap.Items = append(v.ConfigMap.Items, corev1.KeyToPath{Key: k, Path: k})
	}
	spec.Volumes = []corev1.Volume{v}
	return spec
}

// labelConfigMap sets one label of a ConfigMap: metadata only.
func labelConfigMap(t *testing.T, ns, name, key, value string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value)
	if err := k8s.Patch(bg, cm, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		t.Fatalf("label configmap %s/%s: %v", ns, name, err)
	}
}

// waitRecord waits until an unstamped Deployment carries a record of the config its pods
// run, made for its current template and admitted by the webhook (its marker gone), with
// its template untouched. At a first start the watcher may write a record before the API
// server calls the webhook that dev mode is registering: that write keeps its marker (a
// bypass) and the watcher writes it again through the webhook; only then is it settled.
func waitRecord(t *testing.T, before *appsv1.Deployment) *appsv1.Deployment {
	t.Helper()
	var d *appsv1.Deployment
	framework.Eventually(t, 60*time.Second, "record on "+before.Name, func() error {
		d = getDeployment(t, before.Namespace, before.Name)
		if _, ok := stamp.ObservedFor(d.Annotations, &d.Spec.Template); !ok {
			return fmt.Errorf("no valid record: %q", d.Annotations[stamp.ObservedAnnotation])
		}
		if stamp.ParseMarker(d.Annotations).Present {
			return fmt.Errorf("record not admitted by the webhook yet (marker %q)", d.Annotations[stamp.NudgeAnnotation])
		}
		return nil
	})
	if !templateEqual(d, before) {
		t.Fatalf("%s: recording changed the pod template: %v", before.Name, d.Spec.Template.Annotations)
	}
	return d
}

func templateEqual(a, b *appsv1.Deployment) bool {
	return equality.Semantic.DeepEqual(a.Spec.Template, b.Spec.Template)
}

// templateKept asserts over period that the Deployments keep their pod templates: no
// rollout (metadata may be written).
func templateKept(t *testing.T, period time.Duration, before ...*appsv1.Deployment) {
	t.Helper()
	framework.Consistently(t, period, "pod templates kept", func() error {
		for _, b := range before {
			if d := getDeployment(t, b.Namespace, b.Name); !templateEqual(d, b) {
				return fmt.Errorf("%s: template changed: %v -> %v", b.Name, b.Spec.Template.Annotations, d.Spec.Template.Annotations)
			}
		}
		return nil
	})
}

// freePort is a free port on the loopback interface; the test fails without one.
func freePort(t *testing.T) int {
	t.Helper()
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// freeAddr is 127.0.0.1 on a free port.
func freeAddr(t *testing.T) string { return fmt.Sprintf("127.0.0.1:%d", freePort(t)) }
