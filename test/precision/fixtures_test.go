package precision

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/hashdoc"
	"github.com/configstamp/configstamp/test/internal/configmaps"
	"github.com/configstamp/configstamp/test/internal/deployments"
)

var bg = context.Background()

// settle is how long a ReplicaSet count must hold: past the debounce (2s), the check,
// and a rollout that should not happen.
const settle = 6 * time.Second

// consumer is how a fixture's Deployment consumes its ConfigMap.
type consumer func(cm string) corev1.PodSpec

func container(c corev1.Container) corev1.PodSpec {
	c.Name, c.Image = "app", "registry.example/app:1"
	return corev1.PodSpec{Containers: []corev1.Container{c}}
}

func volume(items []string, optional bool) consumer {
	return func(cm string) corev1.PodSpec {
		spec := container(corev1.Container{VolumeMounts: []corev1.VolumeMount{{Name: "cfg", MountPath: "/etc/cfg"}}})
		src := &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}
		if optional {
			src.Optional = ptr.To(true)
		}
		for _, k := range items {
			src.Items = append(src.Items, corev1.KeyToPath{Key: k, Path: k})
		}
		spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: src}}}
		return spec
	}
}

func projected(items ...string) consumer {
	return func(cm string) corev1.PodSpec {
		spec := container(corev1.Container{VolumeMounts: []corev1.VolumeMount{{Name: "cfg", MountPath: "/etc/cfg"}}})
		p := &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}
		for _, k := range items {
			p.Items = append(p.Items, corev1.KeyToPath{Key: k, Path: k})
		}
		spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ConfigMap: p}}}}}}
		return spec
	}
}

func keyRef(key string) consumer {
	return func(cm string) corev1.PodSpec {
		return container(corev1.Container{Env: []corev1.EnvVar{{Name: "K", ValueFrom: &corev1.EnvVarSource{
			ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: cm}, Key: key}}}}})
	}
}

func envFrom(cm string) corev1.PodSpec {
	return container(corev1.Container{EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}})
}

// docSource is what the pods see of a fixture's ConfigMap, for the documented hash.
func (c consumer) doc(cm string) hashdoc.Source {
	src := stamp.References(ptr.To(c(cm)))[0]
	return hashdoc.Source{Name: cm, Keys: src.Keys, EnvOnly: !src.Binary}
}

// createConfigMap creates a ConfigMap with data.
func createConfigMap(t testing.TB, ns, name string, data map[string]string) {
	t.Helper()
	configmaps.Create(t, env.Client, ns, name, data, nil)
}

// pauseDeployment sets a Deployment's spec.paused, as kubectl rollout pause and resume do.
func pauseDeployment(t testing.TB, ns, name string, paused bool) {
	t.Helper()
	patchDeployment(t, ns, name, fmt.Sprintf(`{"spec":{"paused":%t}}`, paused))
}

// patchDeployment merge-patches a Deployment.
func patchDeployment(t testing.TB, ns, name, patch string) {
	t.Helper()
	d := &appsv1.Deployment{}
	d.Namespace, d.Name = ns, name
	if err := env.Client.Patch(context.Background(), d, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatalf("patch %s/%s with %s: %v", ns, name, patch, err)
	}
}

// patchConfigMap merge-patches a ConfigMap.
func patchConfigMap(t testing.TB, ns, name, patch string) {
	t.Helper()
	configmaps.Patch(t, env.Client, ns, name, patch)
}

func setData(t testing.TB, ns, name, key, value string) {
	t.Helper()
	configmaps.SetData(t, env.Client, ns, name, key, value)
}

func deleteConfigMap(t testing.TB, ns, name string) {
	t.Helper()
	configmaps.Delete(t, env.Client, ns, name)
}

// deleteDeployment deletes a Deployment with its ReplicaSets and pods, and waits until
// it is gone.
func deleteDeployment(t testing.TB, ns, name string) {
	t.Helper()
	deleteWorkload(t, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
}

// deleteStatefulSet deletes a StatefulSet with its ControllerRevisions and pods, and
// waits until it is gone.
func deleteStatefulSet(t testing.TB, ns, name string) {
	t.Helper()
	deleteWorkload(t, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
}

// deleteWorkload deletes obj with what it controls (foreground), and waits until it is
// gone.
func deleteWorkload(t testing.TB, obj client.Object) {
	t.Helper()
	what := fmt.Sprintf("%T %s/%s", obj, obj.GetNamespace(), obj.GetName())
	if err := env.Client.Delete(bg, obj, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatalf("delete %s: %v", what, err)
	}
	framework.Eventually(t, 2*time.Minute, what+" gone", func() error {
		if err := env.Client.Get(bg, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
}

// applyDeployment writes the Deployment applied (as createDeployment makes it for the
// fixture applied: two replicas mounting the ConfigMap applied) with client-side kubectl
// apply, with pod-template annotations tmpl (a YAML flow map; "": none).
func applyDeployment(t testing.TB, ns, tmpl string) {
	t.Helper()
	kubectlApply(t, ns, deploymentManifest("applied", "", tmpl))
}

// deploymentManifest is the Deployment name as createDeployment makes it (two replicas
// mounting the ConfigMap name), with metadata annotations meta and pod-template
// annotations tmpl (YAML flow maps; "": none).
func deploymentManifest(name, meta, tmpl string) string {
	annotations := ""
	if meta != "" {
		annotations = "\n  annotations: " + meta
	}
	tmplAnnotations := ""
	if tmpl != "" {
		tmplAnnotations = "\n      annotations: " + tmpl
	}
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s%[2]s
spec:
  replicas: 2
  selector:
    matchLabels: {app: %[1]s}
  template:
    metadata:
      labels: {app: %[1]s}%[3]s
    spec:
      containers:
      - name: app
        image: registry.example/app:1
        volumeMounts:
        - {name: cfg, mountPath: /etc/cfg}
      volumes:
      - name: cfg
        configMap: {name: %[1]s}
`, name, annotations, tmplAnnotations)
}

// configMapManifest is the ConfigMap name holding k.
func configMapManifest(name, k string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  k: %q\n", name, k)
}

// kubectlApply writes manifest with kubectl apply and args (none: client-side).
func kubectlApply(t testing.TB, ns, manifest string, args ...string) {
	t.Helper()
	cmd := env.Command("", nil, "kubectl", append([]string{"--namespace", ns, "apply", "-f", "-"}, args...)...)
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply %v: %v\n%s", args, err, out)
	}
}

// applier is a way of writing with kubectl apply: client-side, or server-side as Argo
// CD writes (field manager argocd-controller, its tracking annotation on the
// Deployment, always --force-conflicts).
type applier struct {
	name string
	args []string
	meta func(ns, name string) string
}

var appliers = []applier{
	{"client-side", nil, func(string, string) string { return "" }},
	{"argocd", []string{"--server-side", "--field-manager", "argocd-controller", "--force-conflicts"}, func(ns, name string) string {
		return fmt.Sprintf(`{argocd.argoproj.io/tracking-id: "%s:apps/Deployment:%s/%s"}`, name, ns, name)
	}},
}

// apply writes manifest with kubectl apply as a does.
func (a applier) apply(t testing.TB, ns, manifest string) {
	t.Helper()
	kubectlApply(t, ns, manifest, a.args...)
}

// app is the ConfigMap name holding k and the Deployment name mounting it
// (deploymentManifest), as a writes them.
func (a applier) app(ns, name, k string) string {
	return configMapManifest(name, k) + "---\n" + deploymentManifest(name, a.meta(ns, name), "")
}

// createDeployment creates a Deployment of two replicas consuming cm as c says.
func createDeployment(t testing.TB, ns, name, cm string, c consumer) {
	t.Helper()
	if err := env.Client.Create(bg, deployments.New(ns, name, 2, c(cm))); err != nil {
		t.Fatalf("create deployment %s/%s: %v", ns, name, err)
	}
}

// createStatefulSet creates a StatefulSet of two replicas (started at once, rolled one
// pod at a time) consuming cm as c says.
func createStatefulSet(t testing.TB, ns, name, cm string, c consumer) {
	t.Helper()
	labels := map[string]string{"app": name}
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: appsv1.StatefulSetSpec{
		Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels}, ServiceName: name,
		PodManagementPolicy: appsv1.ParallelPodManagement,
		Template:            corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: c(cm)},
	}}
	if err := env.Client.Create(bg, s); err != nil {
		t.Fatalf("create statefulset %s/%s: %v", ns, name, err)
	}
}

// docHash is the config hash of the ConfigMap cm as c consumes it, recomputed from the
// encoding documented in docs/hash.md.
func docHash(t testing.TB, ns, cm string, c consumer) string {
	t.Helper()
	return hashdoc.Hash([]hashdoc.Source{c.doc(cm)}, configmaps.Lookup(t, env.Client, ns), framework.HashKey, ns)
}

// rollouts asserts that the Deployment reaches exactly n ReplicaSets and stays there.
func rollouts(t testing.TB, ns, name string, n int) *appsv1.Deployment {
	t.Helper()
	return env.ExpectReplicaSets(t, ns, name, n, settle)
}

// waitRecord waits until a Deployment carries a record made for its template.
func waitRecord(t testing.TB, ns, name string) {
	t.Helper()
	waitRecordOf(t, name, "", func() client.Object { return env.Deployment(t, ns, name) })
}

// waitRecordOf waits until the workload get reads carries a record made for its
// template, of config hash want ("": any).
func waitRecordOf(t testing.TB, name, want string, get func() client.Object) {
	t.Helper()
	framework.Eventually(t, time.Minute, "record on "+name, func() error {
		obj := get()
		tmpl := workloadTemplate(obj)
		o, ok := stamp.ObservedFor(obj.GetAnnotations(), tmpl)
		if !ok || (want != "" && o.Hash != want) {
			return fmt.Errorf("no valid record of hash %q: %q", want, obj.GetAnnotations()[stamp.ObservedAnnotation])
		}
		return nil
	})
}

// workloadTemplate is the pod template of a Deployment or a StatefulSet.
func workloadTemplate(obj client.Object) *corev1.PodTemplateSpec {
	switch w := obj.(type) {
	case *appsv1.Deployment:
		return &w.Spec.Template
	case *appsv1.StatefulSet:
		return &w.Spec.Template
	}
	panic(fmt.Sprintf("no pod template in %T", obj))
}

// revisions asserts that the StatefulSet reaches exactly n ControllerRevisions (its
// rollouts, as test/kinds counts them) and stays there.
func revisions(t testing.TB, ns, name string, n int) *appsv1.StatefulSet {
	t.Helper()
	return env.ExpectRevisions(t, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, n, settle).(*appsv1.StatefulSet)
}

// findEvent looks for an Event of reason on the Deployment.
func findEvent(ns, name, reason string) error {
	var evs corev1.EventList
	if err := env.Client.List(bg, &evs, client.InNamespace(ns)); err != nil {
		return err
	}
	for _, e := range evs.Items {
		if e.InvolvedObject.Name == name && e.Reason == reason {
			return nil
		}
	}
	return fmt.Errorf("no %s event on %s among %d", reason, name, len(evs.Items))
}

// addVolume mounts one more ConfigMap into a Deployment's pods (an update of its template).
func addVolume(t testing.TB, ns, name, cm string) {
	t.Helper()
	d := env.Deployment(t, ns, name)
	d.Spec.Template.Spec.Volumes = append(d.Spec.Template.Spec.Volumes, corev1.Volume{Name: cm, VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}})
	d.Spec.Template.Spec.Containers[0].VolumeMounts = append(d.Spec.Template.Spec.Containers[0].VolumeMounts,
		corev1.VolumeMount{Name: cm, MountPath: "/etc/" + cm})
	if err := env.Client.Update(bg, d); err != nil {
		t.Fatalf("update deployment %s/%s: %v", ns, name, err)
	}
}
