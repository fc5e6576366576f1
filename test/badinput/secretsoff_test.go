package badinput

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/test/framework"
)

// TestSecretConsumedWithSecretsOff: without --secrets, a Deployment consuming a Secret
// (volume, envFrom, key reference) and a ConfigMap is stamped with the ConfigMap alone,
// and configstamp never reads the Secret (the API server's audit log).
func TestSecretConsumedWithSecretsOff(t *testing.T) {
	s := &suite{cs: env.Start(t, framework.Options{}), key: framework.HashKey}
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "cfg", map[string]string{"k": "v"}))
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sec"}, StringData: map[string]string{"password": "p"}})
	spec := podWithVolumes("cfg")
	spec.Volumes = append(spec.Volumes, volume("sec", "sec", true))
	c := &spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "sec", MountPath: "/sec"})
	c.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}}}}
	c.Env = []corev1.EnvVar{{Name: "P", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "password"}}}}
	mark := auditMark()
	create(t, deployment(ns, "app", spec))
	waitStamp(t, ns, "app", s.docHash(t, ns, cmSource("cfg")))
	if evs := reads(t, mark, "secrets", ns); len(evs) != 0 {
		t.Fatalf("configstamp read Secrets with Secrets off: %+v", evs)
	}
}
