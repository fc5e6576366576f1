package stamp

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func cmVolume(name string, keys ...string) corev1.Volume {
	v := corev1.Volume{Name: "v-" + name, VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}
	for _, k := range keys {
		v.ConfigMap.Items = append(v.ConfigMap.Items, corev1.KeyToPath{Key: k, Path: k})
	}
	return v
}

func keyRef(env, name, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: env, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}}
}

func TestReferences(t *testing.T) {
	all := func(name string) Source { return Source{Kind: KindConfigMap, Name: name, AllKeys: true} }
	some := func(name string, keys ...string) Source { return Source{Kind: KindConfigMap, Name: name, Keys: keys} }
	tests := []struct {
		name string
		spec *corev1.PodSpec
		want []Source
	}{
		{"nil spec", nil, nil},
		{"no config", &corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Env: []corev1.EnvVar{{Name: "X", Value: "1"}}}}}, nil},
		{"volume without items sees all keys", &corev1.PodSpec{Volumes: []corev1.Volume{cmVolume("app")}}, []Source{all("app")}},
		{"volume with items sees those keys", &corev1.PodSpec{Volumes: []corev1.Volume{cmVolume("app", "b.yaml", "a.yaml")}}, []Source{some("app", "a.yaml", "b.yaml")}},
		{"projected sources", &corev1.PodSpec{Volumes: []corev1.Volume{{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "one"}}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "two"}, Items: []corev1.KeyToPath{{Key: "k", Path: "k"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{}},
		}}}}}}, []Source{all("one"), some("two", "k")}},
		{"envFrom in an init container", &corev1.PodSpec{InitContainers: []corev1.Container{{Name: "i", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "init"}}}}}}}, []Source{all("init")}},
		{"env keyRef", &corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{keyRef("A", "env", "a"), keyRef("B", "env", "b"), keyRef("A2", "env", "a")}}}}, []Source{some("env", "a", "b")}},
		{"union: items and keyRef", &corev1.PodSpec{Volumes: []corev1.Volume{cmVolume("m", "x")}, Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{keyRef("Y", "m", "y")}}}}, []Source{some("m", "x", "y")}},
		{"any all-keys reference wins", &corev1.PodSpec{Volumes: []corev1.Volume{cmVolume("m", "x"), cmVolume("m")}}, []Source{all("m")}},
		{"secrets and empty names are not config", &corev1.PodSpec{Volumes: []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}}, cmVolume("")}}, nil},
		{"sorted by name", &corev1.PodSpec{Volumes: []corev1.Volume{cmVolume("zeta"), cmVolume("alpha")}, Containers: []corev1.Container{{Name: "c", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "mid"}}}}}}}, []Source{all("alpha"), all("mid"), all("zeta")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := References(tt.spec)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("References() = %#v, want %#v", got, tt.want)
			}
		})
	}
}
