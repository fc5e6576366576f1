package stamp

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// benchSpec is a pod spec referencing n ConfigMaps in the ways real charts do.
func benchSpec(n int) *corev1.PodSpec {
	spec := &corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}, {Name: "sidecar"}}, InitContainers: []corev1.Container{{Name: "init"}}}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("config-%02d", i)
		ref := corev1.LocalObjectReference{Name: name}
		switch i % 4 {
		case 0:
			spec.Volumes = append(spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref}}})
		case 1:
			spec.Volumes = append(spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: ref, Items: []corev1.KeyToPath{{Key: "key-0", Path: "a"}}}}}}}})
		case 2:
			spec.Containers[0].EnvFrom = append(spec.Containers[0].EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref}})
		case 3:
			spec.InitContainers[0].Env = append(spec.InitContainers[0].Env, corev1.EnvVar{Name: "X", ValueFrom: &corev1.EnvVarSource{
				ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: ref, Key: "key-1"}}})
		}
	}
	return spec
}

// BenchConfigMaps returns n ConfigMaps of about size bytes each, in 8 keys.
func benchConfigMaps(n, size int) map[string]*corev1.ConfigMap {
	out := map[string]*corev1.ConfigMap{}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("config-%02d", i)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{}}
		for k := 0; k < 8; k++ {
			cm.Data[fmt.Sprintf("key-%d", k)] = strings.Repeat(string(rune('a'+k)), size/8)
		}
		out[name] = cm
	}
	return out
}

func BenchmarkReferences(b *testing.B) {
	for _, n := range []int{1, 5, 20} {
		spec := benchSpec(n)
		b.Run(fmt.Sprintf("configmaps=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if len(References(spec)) != n {
					b.Fatal("wrong reference count")
				}
			}
		})
	}
}

// BenchmarkCompute hashes n sources of size bytes each, ConfigMaps and Secrets of the
// same content, each digest an HMAC-SHA256 under a 32-byte namespace key, as configstamp
// digests them. The lookup hands over the content as the live read would (a Secret as
// SecretContent gives it), so the Secret cases differ from the ConfigMap ones by the
// kind's name alone.
func BenchmarkCompute(b *testing.B) {
	key := NamespaceKey([]byte(strings.Repeat("k", 32)), "shop")
	for _, kind := range []struct {
		label, kind string
	}{{"configmaps", KindConfigMap}, {"secrets", KindSecret}} {
		for _, n := range []int{1, 5, 20} {
			for _, size := range []int{1 << 10, 64 << 10, 1 << 20} {
				cms := benchConfigMaps(n, size)
				srcs := References(benchSpec(n))
				for i := range srcs {
					srcs[i].AllKeys, srcs[i].Keys = true, nil // hash everything: the worst case
					srcs[i].Kind = kind.kind
				}
				lookup := func(_ context.Context, _, name string) (*corev1.ConfigMap, error) { return cms[name], nil }
				b.Run(fmt.Sprintf("%s=%d/size=%s", kind.label, n, human(size)), func(b *testing.B) {
					b.ReportAllocs()
					b.SetBytes(int64(n * size))
					for b.Loop() {
						if _, err := Compute(context.Background(), srcs, lookup, key); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

func human(size int) string {
	if size >= 1<<20 {
		return fmt.Sprintf("%dMiB", size>>20)
	}
	return fmt.Sprintf("%dKiB", size>>10)
}
