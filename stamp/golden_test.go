package stamp

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// goldenSpec consumes ConfigMaps in every form a pod spec allows.
func goldenSpec() *corev1.PodSpec {
	ref := func(n string) corev1.LocalObjectReference { return corev1.LocalObjectReference{Name: n} }
	return &corev1.PodSpec{
		Volumes: []corev1.Volume{
			{Name: "whole", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref("vol-all")}}},
			{Name: "items", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref("vol-items"),
				Items: []corev1.KeyToPath{{Key: "b.yaml", Path: "b"}, {Key: "absent", Path: "x"}}, Optional: ptr.To(true)}}},
			{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: ref("proj"), Items: []corev1.KeyToPath{{Key: "p", Path: "p"}}}},
			}}}},
			{Name: "gone", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref("gone"), Optional: ptr.To(true)}}},
		},
		InitContainers: []corev1.Container{{Name: "init", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref("env-from")}}}}},
		Containers: []corev1.Container{{Name: "app", Env: []corev1.EnvVar{
			{Name: "K", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: ref("key-ref"), Key: "k"}}},
		}}},
	}
}

func goldenConfigMaps() []*corev1.ConfigMap {
	return []*corev1.ConfigMap{
		cm("vol-all", map[string]string{"a.yaml": "a: 1\n", "z": ""}, map[string][]byte{"logo.png": {0x89, 0x50, 0x4e, 0x47}}),
		cm("vol-items", map[string]string{"a.yaml": "invisible", "b.yaml": "b: 2\n"}, nil),
		cm("proj", map[string]string{"p": "projected", "q": "invisible"}, nil),
		cm("env-from", map[string]string{"LOG_LEVEL": "debug", "PORT": "8080"}, map[string][]byte{"blob": {0}}),
		cm("key-ref", map[string]string{"k": "v", "other": "invisible"}, nil),
	}
}

// TestGoldenStamps pins the stamps this version computes for ConfigMap-only templates,
// under the tests' key in namespace "shop". A configstamp upgrade that changed them would
// re-stamp, and so roll, every Deployment at once: change a value here only with a
// documented reason (docs/hash.md). Changed on purpose for configstamp/v2 (every digest
// keyed per namespace; docs/install.md "Upgrading").
func TestGoldenStamps(t *testing.T) {
	tests := []struct {
		name       string
		spec       *corev1.PodSpec
		hash, srcs string
	}{
		{"every reference form", goldenSpec(),
			"6f89e2c091d921ac3f3179c993d7b4633cc1ecee4d05452a0cea589e9e683210",
			"configmap/env-from=f5f94331a715,configmap/gone=missing,configmap/key-ref=5ec57ec47449,configmap/proj=358f2034785c,configmap/vol-all=be2cbcb8eefc,configmap/vol-items=3bd81b0551f4"},
		{"one whole volume", &corev1.PodSpec{Volumes: goldenSpec().Volumes[:1]},
			"32828ae144ff40f8cb29bd668963d200fc70091edcfd994362b220202f4c2478", "configmap/vol-all=be2cbcb8eefc"},
		// Changed once, before any release (documented in docs/hash.md): env and envFrom cannot see
		// binaryData, so it no longer counts for them; this template's stamp ignores the
		// binaryData key of env-from.
		{"envFrom of a ConfigMap with binaryData", &corev1.PodSpec{InitContainers: goldenSpec().InitContainers},
			"cc9c054f0693d8e5d3366ad1331647d4e526a7980bd0171bb6fb67e0f519c0ab", "configmap/env-from=f5f94331a715"},
		{"only a missing one", &corev1.PodSpec{Volumes: goldenSpec().Volumes[3:]},
			"57d24218d75910e00ccea138ee32f1cb53ada1c4950232f8499c99313cdf4468", "configmap/gone=missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := Compute(context.Background(), References(tt.spec), lookupOf(goldenConfigMaps()...), testNSKey)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%q, %q", st.Hash, st.SourcesAnnotation())
			if st.Hash != tt.hash || st.SourcesAnnotation() != tt.srcs {
				t.Fatalf("stamp changed:\n got  %s %s\n want %s %s", st.Hash, st.SourcesAnnotation(), tt.hash, tt.srcs)
			}
		})
	}
}
