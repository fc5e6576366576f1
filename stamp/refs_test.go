package stamp

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
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
	// vol and env describe a required source seen by a volume or by env alone.
	vol := func(name string, keys ...string) Source {
		return Source{Kind: KindConfigMap, Name: name, AllKeys: keys == nil, Keys: keys, Binary: true, Required: true, RequiredKeys: keys}
	}
	env := func(name string, keys ...string) Source {
		return Source{Kind: KindConfigMap, Name: name, AllKeys: keys == nil, Keys: keys, Required: true, RequiredKeys: keys, RequiredEnvKeys: keys}
	}
	optional := func(s Source) Source { s.Required, s.RequiredKeys, s.RequiredEnvKeys = false, nil, nil; return s }
	optVolume := cmVolume("o", "k")
	optVolume.ConfigMap.Optional = ptr.To(true)
	optRef := keyRef("O", "oe", "k")
	optRef.ValueFrom.ConfigMapKeyRef.Optional = ptr.To(true)
	tests := []struct {
		name string
		spec *corev1.PodSpec
		want []Source
	}{
		{"nil spec", nil, nil},
		{"no config", &corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Env: []corev1.EnvVar{{Name: "X", Value: "1"}}}}}, nil},
		{"volume without items sees all keys", &corev1.PodSpec{Volumes: []corev1.Volume{cmVolume("app")}}, []Source{vol("app")}},
		{"volume with items sees those keys", &corev1.PodSpec{Volumes: []corev1.Volume{cmVolume("app", "b.yaml", "a.yaml")}}, []Source{vol("app", "a.yaml", "b.yaml")}},
		{"projected sources", &corev1.PodSpec{Volumes: []corev1.Volume{{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "one"}}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "two"}, Items: []corev1.KeyToPath{{Key: "k", Path: "k"}}, Optional: ptr.To(true)}},
			{DownwardAPI: &corev1.DownwardAPIProjection{}},
		}}}}}}, []Source{vol("one"), optional(vol("two", "k"))}},
		{"envFrom in an init container", &corev1.PodSpec{InitContainers: []corev1.Container{{Name: "i", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "init"}}}}}}}, []Source{env("init")}},
		{"env keyRef", &corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{keyRef("A", "env", "a"), keyRef("B", "env", "b"), keyRef("A2", "env", "a")}}}}, []Source{env("env", "a", "b")}},
		{"optional references", &corev1.PodSpec{Volumes: []corev1.Volume{optVolume}, Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{optRef}}}},
			[]Source{optional(vol("o", "k")), optional(env("oe", "k"))}},
		{"one required reference makes it required", &corev1.PodSpec{Volumes: []corev1.Volume{optVolume}, Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{keyRef("R", "o", "r")}}}},
			[]Source{{Kind: KindConfigMap, Name: "o", Keys: []string{"k", "r"}, Binary: true, Required: true, RequiredKeys: []string{"r"}, RequiredEnvKeys: []string{"r"}}}},
		{"union: items and keyRef", &corev1.PodSpec{Volumes: []corev1.Volume{cmVolume("m", "x")}, Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{keyRef("Y", "m", "y")}}}},
			[]Source{{Kind: KindConfigMap, Name: "m", Keys: []string{"x", "y"}, Binary: true, Required: true, RequiredKeys: []string{"x", "y"}, RequiredEnvKeys: []string{"y"}}}},
		{"any all-keys reference wins; required keys stay", &corev1.PodSpec{Volumes: []corev1.Volume{cmVolume("m", "x"), cmVolume("m")}},
			[]Source{{Kind: KindConfigMap, Name: "m", AllKeys: true, Binary: true, Required: true, RequiredKeys: []string{"x"}}}},
		{"secrets and empty names are not config", &corev1.PodSpec{Volumes: []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}}, cmVolume("")}}, nil},
		{"sorted by name", &corev1.PodSpec{Volumes: []corev1.Volume{cmVolume("zeta"), cmVolume("alpha")}, Containers: []corev1.Container{{Name: "c", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "mid"}}}}}}}, []Source{vol("alpha"), env("mid"), vol("zeta")}},
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

func TestUnmet(t *testing.T) {
	c := cm("c", map[string]string{"a": "1"}, map[string][]byte{"bin": {1}})
	tests := []struct {
		name string
		src  Source
		cm   *corev1.ConfigMap
		want string
	}{
		{"required and missing", Source{Kind: KindConfigMap, Name: "c", AllKeys: true, Required: true}, nil, "configmap/c is missing"},
		{"optional and missing", Source{Kind: KindConfigMap, Name: "c", AllKeys: true}, nil, ""},
		{"required key present", Source{Kind: KindConfigMap, Name: "c", Keys: []string{"a"}, Required: true, RequiredKeys: []string{"a"}}, c, ""},
		{"required keys absent", Source{Kind: KindConfigMap, Name: "c", Keys: []string{"x", "y"}, Required: true, RequiredKeys: []string{"x", "y"}}, c, "configmap/c lacks key x, y"},
		{"binary key seen by a volume", Source{Kind: KindConfigMap, Name: "c", Keys: []string{"bin"}, Binary: true, Required: true, RequiredKeys: []string{"bin"}}, c, ""},
		{"binary key not seen by env", Source{Kind: KindConfigMap, Name: "c", Keys: []string{"bin"}, Required: true, RequiredKeys: []string{"bin"}}, c, "configmap/c lacks key bin"},
		{"optional key absent", Source{Kind: KindConfigMap, Name: "c", Keys: []string{"x"}}, c, ""},
		{"binary key an env reference needs, though a volume mounts it", Source{Kind: KindConfigMap, Name: "c", Keys: []string{"bin"}, Binary: true,
			Required: true, RequiredKeys: []string{"bin"}, RequiredEnvKeys: []string{"bin"}}, c, "configmap/c lacks key bin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.src.Unmet(tt.cm); got != tt.want {
				t.Fatalf("Unmet() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestReferencesOnlyKeepsEachEnvFromOnce: containers of one pod that all take the same
// ConfigMap with envFrom (a Helm chart's sidecars) leave one entry in the cached form;
// entries that differ (optional, prefix, kind) are each kept. Consumed reads both forms
// alike (FuzzConsumed).
func TestReferencesOnlyKeepsEachEnvFromOnce(t *testing.T) {
	cm := func(name string, optional bool, prefix string) corev1.EnvFromSource {
		e := corev1.EnvFromSource{Prefix: prefix, ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}
		if optional {
			e.ConfigMapRef.Optional = &optional
		}
		return e
	}
	spec := &corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", EnvFrom: []corev1.EnvFromSource{cm("a", false, "")}}},
		Containers: []corev1.Container{
			{Name: "app", EnvFrom: []corev1.EnvFromSource{cm("a", false, ""), cm("a", true, ""), cm("a", false, "X_")}},
			{Name: "sidecar", EnvFrom: []corev1.EnvFromSource{cm("a", false, ""), cm("b", false, ""), cm("a", true, "")}},
		},
	}
	only := ReferencesOnly(spec)
	want := []corev1.EnvFromSource{cm("a", false, ""), cm("a", true, ""), cm("a", false, "X_"), cm("b", false, "")}
	if len(only.Containers) != 1 || !reflect.DeepEqual(only.Containers[0].EnvFrom, want) {
		t.Fatalf("ReferencesOnly kept envFrom %+v, want each distinct entry once: %+v", only.Containers, want)
	}
	if got, whole := Consumed(nil, &only, Options{}), Consumed(nil, spec, Options{}); !reflect.DeepEqual(got, whole) {
		t.Fatalf("Consumed of ReferencesOnly %#v, of the whole spec %#v", got, whole)
	}
}

// TestReferencesOnlyManyEntries: a template with tens of thousands of distinct envFrom
// entries and env selections (one tenant's; the API server takes them) is reduced at
// once, each kept once: the cache's transform runs this on every event of every
// workload, and comparing each entry with each kept one took minutes here, holding up
// the kind's informer for every tenant. The deadline is a thousand times what it takes.
func TestReferencesOnlyManyEntries(t *testing.T) {
	const n = 20000
	var ct corev1.Container
	for i := range n {
		cm := corev1.LocalObjectReference{Name: "a"}
		ct.EnvFrom = append(ct.EnvFrom, corev1.EnvFromSource{Prefix: fmt.Sprintf("P%d_", i), ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: cm}})
		ct.Env = append(ct.Env, corev1.EnvVar{Name: "V", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: cm, Key: fmt.Sprintf("k%d", i)}}})
	}
	spec := &corev1.PodSpec{Containers: []corev1.Container{ct, ct}} // the second adds nothing
	done := make(chan corev1.PodSpec, 1)
	go func() { done <- ReferencesOnly(spec) }()
	select {
	case only := <-done:
		if len(only.Containers) != 1 || len(only.Containers[0].EnvFrom) != n || len(only.Containers[0].Env) != n {
			t.Fatalf("ReferencesOnly kept %+v, want one container of %d envFrom entries and %d env selections", len(only.Containers), n, n)
		}
	case <-time.After(time.Minute):
		t.Fatalf("ReferencesOnly of %d envFrom entries and %d env selections not done within a minute", n, n)
	}
}
