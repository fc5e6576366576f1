package badinput

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/hashdoc"
)

// maxData is the most data a ConfigMap or Secret may hold (keys and values), less a
// margin for the keys.
const maxData = corev1.MaxSecretSize - 1024

// manyKeys is n keys with short values.
func manyKeys(n int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m[fmt.Sprintf("key-%05d", i)] = fmt.Sprintf("value %d", i)
	}
	return m
}

// binary is n bytes of every value.
func binary(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 31)
	}
	return b
}

// consumeEveryWay is a pod spec that takes in big whole (volume), many through items
// and envFrom, and bin through a volume and a key reference, as ConfigMaps or Secrets.
func consumeEveryWay(secret bool, big, many, bin string) corev1.PodSpec {
	spec := corev1.PodSpec{Containers: []corev1.Container{container("app")}}
	c := &spec.Containers[0]
	items := []corev1.KeyToPath{{Key: "key-00001", Path: "a"}, {Key: "key-09999", Path: "b"}}
	keyRef := corev1.EnvVar{Name: "FROM_BIN", ValueFrom: &corev1.EnvVarSource{}}
	spec.Volumes = []corev1.Volume{volume("big", big, secret), volume("many", many, secret), volume("bin", bin, secret)}
	if secret {
		spec.Volumes[1].Secret.Items = items
		c.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: many}}}}
		keyRef.ValueFrom.SecretKeyRef = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: bin}, Key: "text"}
	} else {
		spec.Volumes[1].ConfigMap.Items = items
		c.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: many}}}}
		keyRef.ValueFrom.ConfigMapKeyRef = &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: bin}, Key: "text"}
	}
	c.Env = []corev1.EnvVar{keyRef}
	for _, v := range spec.Volumes {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: "/etc/" + v.Name})
	}
	return spec
}

// testLargeConfigMaps stamps a Deployment consuming ConfigMaps at the API's limits: one
// of 1 MiB, one of 10,000 keys, one with binaryData, through volumes, items, envFrom and
// a key reference, with the hash docs/hash.md gives; a change of each, one at a time,
// rolls it (its stamp becomes the new content's documented hash).
func testLargeConfigMaps(t *testing.T, s *suite) {
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "big", map[string]string{"k": strings.Repeat("b", maxData)}))
	create(t, configMap(ns, "many", manyKeys(10000)))
	bin := configMap(ns, "bin", map[string]string{"text": "t"})
	bin.BinaryData = map[string][]byte{"blob": binary(maxData / 2)}
	create(t, bin)
	create(t, deployment(ns, "app", consumeEveryWay(false, "big", "many", "bin")))
	srcs := []hashdoc.Source{{Name: "big"}, {Name: "many"}, {Name: "bin"}}
	waitStamp(t, ns, "app", s.docHash(t, ns, srcs...))

	// One at a time: each change alone rolls it (configstamp rolls one workload at most
	// every --min-rollout-interval, 10 s).
	for _, c := range []struct{ name, body string }{
		{"many", `{"data":{"key-05000":"changed"}}`},
		{"big", `{"data":{"k":"` + strings.Repeat("c", maxData) + `"}}`},
		{"bin", fmt.Sprintf(`{"binaryData":{"blob":%q}}`, "AAEC")},
	} {
		name, body := c.name, c.body
		before := hashOf(getDeployment(t, ns, "app"))
		patch(t, &corev1.ConfigMap{}, ns, name, body)
		want := s.docHash(t, ns, srcs...)
		if want == before {
			t.Fatalf("changing %s left the documented hash as it was", name)
		}
		waitStamp(t, ns, "app", want)
	}
}

// testLargeSecrets is testLargeConfigMaps with Secrets: keyed digests as documented.
func testLargeSecrets(t *testing.T, s *suite) {
	ns := env.NewNamespace(t, true)
	secret := func(name string, data map[string]string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: data}
	}
	create(t, secret("big", map[string]string{"k": strings.Repeat("b", maxData)}))
	create(t, secret("many", manyKeys(10000)))
	bin := secret("bin", map[string]string{"text": "t"})
	bin.Data = map[string][]byte{"blob": binary(maxData / 2)}
	create(t, bin)
	create(t, deployment(ns, "app", consumeEveryWay(true, "big", "many", "bin")))
	srcs := []hashdoc.Source{{Name: "big", Secret: true}, {Name: "many", Secret: true}, {Name: "bin", Secret: true}}
	waitStamp(t, ns, "app", s.docHash(t, ns, srcs...))

	patch(t, &corev1.Secret{}, ns, "many", `{"stringData":{"key-05000":"changed"}}`)
	patch(t, &corev1.Secret{}, ns, "bin", fmt.Sprintf(`{"data":{"blob":%q}}`, "AAEC"))
	waitStamp(t, ns, "app", s.docHash(t, ns, srcs...))
}

// keyChars is every character a ConfigMap key may hold.
const keyChars = "-._abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// testOddKeysAndNames stamps a Deployment consuming a ConfigMap whose name has the most
// characters a name may have (253) and whose keys use every character a key may hold,
// lead with a dot or a dash, and have the most characters (253), through a volume,
// items, envFrom and key references; a change of the longest key rolls it.
func testOddKeysAndNames(t *testing.T, s *suite) {
	ns := env.NewNamespace(t, true)
	name := strings.Repeat("a", 60) + "." + strings.Repeat("b-c", 40) + "." + strings.Repeat("9", 71)
	longKey := keyChars + strings.Repeat(keyChars[3:], 4)[:253-len(keyChars)]
	if len(name) != 253 || len(longKey) != 253 {
		t.Fatalf("name %d, key %d characters, want 253", len(name), len(longKey))
	}
	data := map[string]string{longKey: "long", ".hidden": "h", "-dash": "d", "_under": "u", "UPPER": "U", "0": "zero", "a..b": "dots", ".x.y": "lead"}
	create(t, configMap(ns, name, data))
	other := configMap(ns, "other", map[string]string{".env": "e", ".hidden": "h", "x": "y"})
	create(t, other)
	spec := podWithVolumes(name)
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "items", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "other"}, Items: []corev1.KeyToPath{{Key: ".env", Path: "dot-env"}}}}})
	c := &spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "items", MountPath: "/etc/items"})
	c.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}
	for i, k := range []string{longKey, ".hidden"} {
		c.Env = append(c.Env, corev1.EnvVar{Name: fmt.Sprintf("K%d", i), ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "other"}, Key: k, Optional: ptr.To(true)}}})
	}
	create(t, deployment(ns, "app", spec))
	srcs := []hashdoc.Source{{Name: name}, {Name: "other", Keys: []string{".env", longKey, ".hidden"}}}
	waitStamp(t, ns, "app", s.docHash(t, ns, srcs...))

	patch(t, &corev1.ConfigMap{}, ns, name, fmt.Sprintf(`{"data":{%q:"changed"}}`, longKey))
	patch(t, &corev1.ConfigMap{}, ns, "other", fmt.Sprintf(`{"data":{%q:"created"}}`, longKey))
	waitStamp(t, ns, "app", s.docHash(t, ns, srcs...))
}

// patch merge-patches one object.
func patch(t *testing.T, obj client.Object, ns, name, body string) {
	t.Helper()
	obj.SetNamespace(ns)
	obj.SetName(name)
	if err := k8s.Patch(bg, obj, client.RawPatch("application/merge-patch+json", []byte(body))); err != nil {
		t.Fatalf("patch %T %s/%s: %v", obj, ns, name, err)
	}
}
