package stamp

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestSourceKinds(t *testing.T) {
	if got, want := SourceNames("/NAME"), "configmap/NAME, secret/NAME or secretproviderclass/NAME"; got != want {
		t.Errorf("SourceNames: %q, want %q", got, want)
	}
	for _, k := range SourceKinds() {
		if SourceKindNamed(k.Name) != k || FindSourceKind(k.Group, k.Kind) != k {
			t.Errorf("%s: not found by its name or API kind", k.Name)
		}
		if got := k.NewMeta().GroupVersionKind(); got != k.GVK() {
			t.Errorf("%s: NewMeta's kind %v, want %v", k.Name, got, k.GVK())
		}
		if k.Content(k.New()) == nil {
			t.Errorf("%s: no content of an empty object", k.Name)
		}
		if k.Flag != "" && k.Counts(Options{}) {
			t.Errorf("%s: counts with its flag %s off", k.Name, k.Flag)
		}
	}
	if SourceKindNamed("deployment") != nil || FindSourceKind("apps", "Deployment") != nil {
		t.Error("found a source kind that is not one")
	}
	if !Secret.Counts(Options{Secrets: true}) || !ConfigMap.Counts(Options{}) {
		t.Error("Secrets count with --secrets, ConfigMaps always")
	}
}

func TestSecretContentMergesStringData(t *testing.T) {
	sec := &corev1.Secret{Data: map[string][]byte{"a": []byte("1"), "b": []byte("2")}, StringData: map[string]string{"b": "3", "c": "4"}}
	cm := Secret.Content(sec)
	want := map[string]string{"a": "1", "b": "3", "c": "4"}
	if len(cm.Data) != len(want) || cm.BinaryData != nil {
		t.Fatalf("content %v, want data %v", cm, want)
	}
	for k, v := range want {
		if cm.Data[k] != v {
			t.Errorf("key %s: %q, want %q", k, cm.Data[k], v)
		}
	}
	if len(sec.Data) != 2 || string(sec.Data["b"]) != "2" {
		t.Errorf("the Secret read was changed: %v", sec.Data)
	}
	if Secret.Content((*corev1.Secret)(nil)) != nil || ConfigMap.Content((*corev1.ConfigMap)(nil)) != nil {
		t.Error("content of nil is not nil")
	}
}
