package kinds

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/argo"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/hashdoc"
	"github.com/configstamp/configstamp/test/internal/configmaps"
)

var bg = context.Background()

// settle is how long a count must hold: past the debounce (2s), the check, and a
// rollout that should not happen.
const settle = 6 * time.Second

// createConfigMap creates a ConfigMap with data (and binaryData when given).
func createConfigMap(t testing.TB, ns, name string, data map[string]string, binary map[string][]byte) {
	t.Helper()
	configmaps.Create(t, env.Client, ns, name, data, binary)
}

// relabel changes only a ConfigMap's labels (a new resourceVersion, the same content).
func relabel(t testing.TB, ns, name string) {
	t.Helper()
	configmaps.Patch(t, env.Client, ns, name, fmt.Sprintf(`{"metadata":{"labels":{"edited":"e%d"}}}`, rand.IntN(1e9)))
}

// docHash is the config hash of the ConfigMaps cms, each consumed whole (every key,
// binaryData included, as a volume or an extra source sees it), recomputed from the
// encoding documented in docs/hash.md.
func docHash(t testing.TB, ns string, cms ...string) string {
	t.Helper()
	var srcs []hashdoc.Source
	for _, cm := range cms {
		srcs = append(srcs, hashdoc.Source{Name: cm})
	}
	return hashdoc.Hash(srcs, configmaps.Lookup(t, env.Client, ns), framework.HashKey, ns)
}

// podTemplate runs one container that mounts the ConfigMap cm whole (none: consumes
// nothing).
func podTemplate(app, cm string) corev1.PodTemplateSpec {
	c := corev1.Container{Name: "app", Image: "registry.example/app:1"}
	spec := corev1.PodSpec{Containers: []corev1.Container{c}}
	if cm != "" {
		spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "cfg", MountPath: "/etc/cfg"}}
		spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}}
	}
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}}, Spec: spec}
}

func selector(app string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
}

// newStatefulSet is a StatefulSet of three replicas, rolled one pod at a time
// (RollingUpdate), consuming cm.
func newStatefulSet(ns, name, cm string) client.Object {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](3), Selector: selector(name), ServiceName: name,
			// Pods start at once; updates still replace one pod at a time.
			PodManagementPolicy: appsv1.ParallelPodManagement,
			UpdateStrategy:      appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType},
			Template:            podTemplate(name, cm),
		},
	}
}

// newDaemonSet is a DaemonSet (one pod on each kwok node) consuming cm.
func newDaemonSet(ns, name, cm string) client.Object {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DaemonSetSpec{
			Selector:       selector(name),
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType},
			Template:       podTemplate(name, cm),
		},
	}
}

// newDeployment is a Deployment of two replicas consuming cm (none: nothing), with
// labels on its own metadata.
func newDeployment(ns, name, cm string, labels map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2), Selector: selector(name), Template: podTemplate(name, cm),
		},
	}
}

// optedIn are the labels of a workload that opts in by itself.
var optedIn = map[string]string{stamp.InjectLabel: stamp.InjectValue}

func create(t testing.TB, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(bg, obj); err != nil {
		t.Fatalf("create %T %s/%s: %v", obj, obj.GetNamespace(), obj.GetName(), err)
	}
}

// template is the pod template of a workload of any kind this package creates.
func template(t testing.TB, obj client.Object) *corev1.PodTemplateSpec {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return &o.Spec.Template
	case *appsv1.StatefulSet:
		return &o.Spec.Template
	case *appsv1.DaemonSet:
		return &o.Spec.Template
	case *argo.Rollout:
		return &o.Spec.Template
	}
	t.Fatalf("no pod template in %T", obj)
	return nil
}

// reread reads obj again, from the API server, through c.
func reread(t testing.TB, c client.Client, obj client.Object) client.Object {
	t.Helper()
	fresh := obj.DeepCopyObject().(client.Object)
	if err := c.Get(bg, client.ObjectKeyFromObject(obj), fresh); err != nil {
		t.Fatalf("get %T %s/%s: %v", obj, obj.GetNamespace(), obj.GetName(), err)
	}
	return fresh
}

// stampedWith asserts that the workload's template carries hash and its metadata a
// record of that hash made for this template.
func stampedWith(t testing.TB, obj client.Object, hash string) {
	t.Helper()
	tmpl := template(t, obj)
	if got := tmpl.Annotations[stamp.HashAnnotation]; got != hash {
		t.Fatalf("%s: template hash %q, want %q", obj.GetName(), got, hash)
	}
	rec, ok := stamp.ObservedFor(obj.GetAnnotations(), tmpl)
	if !ok || rec.Hash != hash {
		t.Fatalf("%s: record %q, want one of %s for its template", obj.GetName(), obj.GetAnnotations()[stamp.ObservedAnnotation], hash)
	}
}

// waitRecord waits until the workload carries a record made for its template (of the
// config hash want) and asserts it is still unstamped: recorded, not rolled.
func waitRecord(t testing.TB, c client.Client, obj client.Object, want string) {
	t.Helper()
	framework.Eventually(t, time.Minute, "record on "+obj.GetName(), func() error {
		fresh := reread(t, c, obj)
		rec, ok := stamp.ObservedFor(fresh.GetAnnotations(), template(t, fresh))
		if !ok {
			return fmt.Errorf("no valid record: %q", fresh.GetAnnotations()[stamp.ObservedAnnotation])
		}
		if rec.Hash != want {
			return fmt.Errorf("record of %s, want %s", rec.Hash, want)
		}
		if h := template(t, fresh).Annotations[stamp.HashAnnotation]; h != "" {
			return fmt.Errorf("stamped %s: a workload configstamp was installed over is recorded, not stamped", h)
		}
		return nil
	})
}

// untouched asserts that configstamp never stamped nor recorded the workload.
func untouched(t testing.TB, obj client.Object) {
	t.Helper()
	fresh := reread(t, env.Client, obj)
	if h := template(t, fresh).Annotations[stamp.HashAnnotation]; h != "" {
		t.Errorf("%s: stamped %s", obj.GetName(), h)
	}
	if r, ok := fresh.GetAnnotations()[stamp.ObservedAnnotation]; ok {
		t.Errorf("%s: recorded %s", obj.GetName(), r)
	}
}
