package integration

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/configstamp/configstamp/internal/argo"
	"github.com/configstamp/configstamp/test/framework"
)

// canaryRollout is a Rollout as users write it, with fields argo.Rollout does not know.
const canaryRollout = `
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata:
  name: canary
spec:
  replicas: 3
  revisionHistoryLimit: 2
  selector:
    matchLabels: {app: canary}
  template:
    metadata:
      labels: {app: canary}
    spec:
      containers:
      - name: app
        image: registry.example/app:1
        envFrom:
        - configMapRef: {name: app-config}
  strategy:
    canary:
      maxSurge: "25%"
      steps:
      - setWeight: 20
      - pause: {}
      - setWeight: 60
      - pause: {duration: 40s}
`

// TestRolloutCRD installs Argo's real Rollout CRD and checks that argo.Rollout reads and
// patches Rollouts through it: its JSON is what the CRD accepts (status.observedGeneration
// a string included), and merge patches keep the fields it does not know.
func TestRolloutCRD(t *testing.T) {
	t.Parallel()
	if err := env.InstallCRDs(bg, framework.ArgoRolloutsCRD()); err != nil {
		t.Fatal(err)
	}
	c := env.ArgoClient(t)
	ns := env.NewNamespace(t, false)

	t.Run("Typed", func(t *testing.T) {
		labels := map[string]string{"app": "typed"}
		r := &argo.Rollout{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "typed"},
			Spec: argo.RolloutSpec{
				Replicas: ptr.To[int32](2),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podWithVolumes("app-config")},
			},
		}
		if err := c.Create(bg, r); err != nil {
			t.Fatalf("create rollout: %v", err)
		}
		got := getRollout(t, c, ns, "typed")
		checkTemplate(t, got, "typed", "app-config")
		if got.Spec.Replicas == nil || *got.Spec.Replicas != 2 || got.Spec.WorkloadRef != nil {
			t.Fatalf("spec %+v", got.Spec)
		}

		gen := got.Generation
		patch := `{"spec":{"template":{"metadata":{"annotations":{"configstamp.io/config-hash":"abc"}}}}}`
		if err := c.Patch(bg, got, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatalf("patch rollout: %v", err)
		}
		patched := getRollout(t, c, ns, "typed")
		if patched.Spec.Template.Annotations["configstamp.io/config-hash"] != "abc" {
			t.Fatalf("template annotations %v", patched.Spec.Template.Annotations)
		}
		if patched.Generation != gen+1 {
			t.Fatalf("generation %d -> %d: a template change is a new generation", gen, patched.Generation)
		}
		checkTemplate(t, patched, "typed", "app-config")

		// The Argo controller writes status.observedGeneration as a string.
		status := fmt.Sprintf(`{"status":{"observedGeneration":"%d"}}`, patched.Generation)
		if err := c.Status().Patch(bg, patched, client.RawPatch(types.MergePatchType, []byte(status))); err != nil {
			t.Fatalf("patch rollout status: %v", err)
		}
		if g := getRollout(t, c, ns, "typed").Status.ObservedGeneration; g != fmt.Sprint(patched.Generation) {
			t.Fatalf("observedGeneration %q, want %q", g, fmt.Sprint(patched.Generation))
		}
	})

	t.Run("UnknownFieldsKept", func(t *testing.T) {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(canaryRollout), &u.Object); err != nil {
			t.Fatal(err)
		}
		u.SetNamespace(ns)
		if err := c.Create(bg, u); err != nil {
			t.Fatalf("create rollout: %v", err)
		}
		r := getRollout(t, c, ns, "canary")
		checkTemplate(t, r, "canary", "")
		if r.Spec.Template.Spec.Containers[0].EnvFrom[0].ConfigMapRef.Name != "app-config" {
			t.Fatalf("envFrom %+v", r.Spec.Template.Spec.Containers[0].EnvFrom)
		}

		// A merge patch from a typed diff, as configstamp makes, touches only what changed.
		changed := r.DeepCopy()
		metav1.SetMetaDataAnnotation(&changed.Spec.Template.ObjectMeta, "configstamp.io/config-hash", "def")
		if err := c.Patch(bg, changed, client.MergeFrom(r)); err != nil {
			t.Fatalf("patch rollout: %v", err)
		}
		after := &unstructured.Unstructured{}
		after.SetGroupVersionKind(argo.GroupVersion.WithKind("Rollout"))
		if err := c.Get(bg, client.ObjectKey{Namespace: ns, Name: "canary"}, after); err != nil {
			t.Fatal(err)
		}
		if v, _, _ := unstructured.NestedString(after.Object, "spec", "template", "metadata", "annotations", "configstamp.io/config-hash"); v != "def" {
			t.Fatalf("annotation %q, want def", v)
		}
		steps, _, _ := unstructured.NestedSlice(after.Object, "spec", "strategy", "canary", "steps")
		surge, _, _ := unstructured.NestedString(after.Object, "spec", "strategy", "canary", "maxSurge")
		limit, _, _ := unstructured.NestedInt64(after.Object, "spec", "revisionHistoryLimit")
		if len(steps) != 4 || surge != "25%" || limit != 2 {
			t.Fatalf("fields argo.Rollout does not know were lost: steps %v, maxSurge %q, revisionHistoryLimit %d", steps, surge, limit)
		}
		checkTemplate(t, getRollout(t, c, ns, "canary"), "canary", "")
	})

	t.Run("Rejected", func(t *testing.T) {
		// The CRD validates: a template without containers is refused, so the checks above
		// ran against a schema with teeth.
		r := &argo.Rollout{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "invalid"},
			Spec:       argo.RolloutSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways}}},
		}
		err := c.Create(bg, r)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "containers") {
			t.Fatalf("a Rollout whose template has no containers: %v, want Invalid for its containers", err)
		}
	})
}

func getRollout(t *testing.T, c client.Client, ns, name string) *argo.Rollout {
	t.Helper()
	var r argo.Rollout
	if err := c.Get(bg, client.ObjectKey{Namespace: ns, Name: name}, &r); err != nil {
		t.Fatalf("get rollout %s/%s: %v", ns, name, err)
	}
	return &r
}

// checkTemplate asserts the Rollout still has its pod template: labels, the container and,
// when volume is set, its ConfigMap volume and mount.
func checkTemplate(t *testing.T, r *argo.Rollout, app, volume string) {
	t.Helper()
	tpl := r.Spec.Template
	if tpl.Labels["app"] != app || r.Spec.Selector == nil || r.Spec.Selector.MatchLabels["app"] != app {
		t.Fatalf("%s: labels %v, selector %v", r.Name, tpl.Labels, r.Spec.Selector)
	}
	if len(tpl.Spec.Containers) != 1 || tpl.Spec.Containers[0].Image != "registry.example/app:1" {
		t.Fatalf("%s: containers %+v", r.Name, tpl.Spec.Containers)
	}
	if volume == "" {
		return
	}
	if len(tpl.Spec.Volumes) != 1 || tpl.Spec.Volumes[0].ConfigMap == nil || tpl.Spec.Volumes[0].ConfigMap.Name != volume {
		t.Fatalf("%s: volumes %+v", r.Name, tpl.Spec.Volumes)
	}
	if m := tpl.Spec.Containers[0].VolumeMounts; len(m) != 1 || m[0].MountPath != "/etc/"+volume {
		t.Fatalf("%s: volume mounts %+v", r.Name, m)
	}
}
