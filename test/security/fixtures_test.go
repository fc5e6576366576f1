package security

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/internal/deployments"
	"github.com/configstamp/configstamp/test/internal/reviews"
)

// pin is the value the attacker wants to learn, in a ConfigMap named flags.
const (
	flags = "feature-flags"
	pin   = "4711"
)

// seed creates what forged reviews name: the pin in kube-system, in a namespace not
// opted in, in victim and (the same content) in attacker; a Secret db without the key
// apikey the reviews ask for, whose existence must not leak; cfg where reviews in scope
// read.
func seed(t *testing.T) {
	t.Helper()
	for _, ns := range []string{excluded, notOptedIn, victim, attacker} {
		create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: flags}, Data: map[string]string{"pin": pin}})
	}
	for _, ns := range []string{excluded, notOptedIn, victim} {
		create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, StringData: map[string]string{"password": "hunter2"}})
	}
	for _, ns := range []string{bulky, flooded, realNS, sentinelNS} {
		create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cfg"}, Data: map[string]string{"k": "v"}})
	}
	// The hash key Secret as the chart creates it (empty): configstamp writes the key.
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: keyNS, Name: "hash-key"}})
}

func create(t *testing.T, obj client.Object, opts ...client.CreateOption) {
	t.Helper()
	if err := k8s.Create(bg, obj, opts...); err != nil {
		t.Fatalf("create %T %s/%s: %v", obj, obj.GetNamespace(), obj.GetName(), err)
	}
}

// consumer is a Deployment in ns whose one container takes every ConfigMap in cms by
// envFrom, mounts every Secret in secrets and asks each for the key apikey.
func consumer(ns, name string, cms, secrets []string) *appsv1.Deployment {
	c := corev1.Container{Name: "app", Image: "registry.example/app:1"}
	var spec corev1.PodSpec
	for _, cm := range cms {
		c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}})
	}
	for i, sec := range secrets {
		vol := fmt.Sprintf("s%d", i)
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: sec}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: vol, MountPath: "/secrets/" + vol})
		c.Env = append(c.Env, corev1.EnvVar{Name: fmt.Sprintf("APIKEY_%d", i), ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: sec}, Key: "apikey"}}})
	}
	spec.Containers = []corev1.Container{c}
	return deployments.New(ns, name, 1, spec)
}

// forged is one review an attacker posts: request namespace reqNS, the object a
// consumer in objNS; size, when set, pads the body (an env value) to that many bytes.
type forged struct {
	reqNS, objNS, name string
	cms, secrets       []string
	size               int
}

// body is the review's JSON.
func (f forged) body() []byte {
	d := consumer(f.objNS, f.name, f.cms, f.secrets)
	raw, _ := json.Marshal(d)
	b := reviewOf(f, raw)
	if f.size > len(b) {
		d.Spec.Template.Spec.Containers[0].Env = append(d.Spec.Template.Spec.Containers[0].Env,
			corev1.EnvVar{Name: "PAD", Value: strings.Repeat("x", f.size-len(b)-len(`{"name":"PAD","value":""},`))})
		raw, _ = json.Marshal(d)
		b = reviewOf(f, raw)
	}
	return b
}

// sources is n ConfigMap names (none of which exists: a read of each is a read all the
// same).
func sources(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("cm-%04d", i)
	}
	return out
}

func reviewOf(f forged, obj []byte) []byte { return reviews.Deployment(f.name, f.reqNS, f.name, obj) }
