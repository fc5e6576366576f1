package badinput

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/hashdoc"
)

// testMissingAndInvalidReferences: optional and required references to ConfigMaps that
// do not exist, a selected key that does not exist, and reference names no object can
// have (the API server checks some reference names, not all) are stamped with the
// documented "missing" marker; creating the optional one rolls the Deployment.
func testMissingAndInvalidReferences(t *testing.T, s *suite) {
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "present", map[string]string{"k": "v"}))
	keyRef := func(env, name, key string, optional bool) corev1.EnvVar {
		return corev1.EnvVar{Name: env, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: ptr.To(optional)}}}
	}
	spec := podWithVolumes("ghost")
	spec.Volumes[0].ConfigMap.Optional = ptr.To(true)
	spec.Containers[0].Env = []corev1.EnvVar{keyRef("ABSENT_KEY", "present", "absent", true)}
	create(t, deployment(ns, "app", spec))
	srcs := []hashdoc.Source{{Name: "ghost"}, {Name: "present", Keys: []string{"absent"}, EnvOnly: true}}
	waitStamp(t, ns, "app", s.docHash(t, ns, srcs...))
	create(t, configMap(ns, "ghost", map[string]string{"now": "here"}))
	waitStamp(t, ns, "app", s.docHash(t, ns, srcs...))

	// A required one is stamped missing too (its pods cannot start until it exists).
	req := deployment(ns, "required", corev1.PodSpec{Containers: []corev1.Container{container("app")}})
	req.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{keyRef("REQUIRED", "required-ghost", "k", false)}
	create(t, req)
	waitStamp(t, ns, "required", s.docHash(t, ns, hashdoc.Source{Name: "required-ghost", Keys: []string{"k"}, EnvOnly: true}))

	// Names no ConfigMap can have: the API server refuses them in references.
	for _, name := range []string{"UPPER", "has_underscore", "has space", "a/b", "..", "."} {
		d := deployment(ns, "odd-name", corev1.PodSpec{Containers: []corev1.Container{container("app")}})
		d.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{keyRef("ODD", name, "k", true)}
		if err := k8s.Create(bg, d, client.DryRunAll); !apierrors.IsInvalid(err) {
			t.Fatalf("reference name %q: want the API server's refusal, got %v", name, err)
		}
	}
}
