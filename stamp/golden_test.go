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

// TestGoldenStamps pins the stamps this version computes for ConfigMap-only templates.
// A configstamp upgrade that changed them would re-stamp, and so roll, every Deployment
// at once: change a value here only with a documented reason (docs/hash.md).
func TestGoldenStamps(t *testing.T) {
	tests := []struct {
		name       string
		spec       *corev1.PodSpec
		hash, srcs string
	}{
		{"every reference form", goldenSpec(),
			"ccbd8a8f3985b57165214335b25015f6617aa1c29be3f0fb77eb549a02b84b3f",
			"configmap/env-from=fa43853213bd,configmap/gone=missing,configmap/key-ref=e2336585845d,configmap/proj=9464455971a9,configmap/vol-all=f73df943b1e3,configmap/vol-items=2ead095e0a0e"},
		{"one whole volume", &corev1.PodSpec{Volumes: goldenSpec().Volumes[:1]},
			"8c852f983d4f2bb598628a74c1a3bee63ba7b2189e3415ce4065231bc43fbdd5", "configmap/vol-all=f73df943b1e3"},
		// Changed once, before any release (documented in docs/hash.md): env and envFrom cannot see
		// binaryData, so it no longer counts for them; this template's stamp ignores the
		// binaryData key of env-from.
		{"envFrom of a ConfigMap with binaryData", &corev1.PodSpec{InitContainers: goldenSpec().InitContainers},
			"8265f9aece9285b578c68bf55eaa4bc4b9355ef3ad8a1efc1435ea75698444d7", "configmap/env-from=fa43853213bd"},
		{"only a missing one", &corev1.PodSpec{Volumes: goldenSpec().Volumes[3:]},
			"b3e0ded94ba2c0e74ce575f079e5b3e29cacbc74d398ac094a984231db527ddb", "configmap/gone=missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := Compute(context.Background(), References(tt.spec), lookupOf(goldenConfigMaps()...), nil)
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
