package configread

import (
	"context"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/configstamp/configstamp/stamp"
)

// status is a SecretProviderClassPodStatus as the driver writes it.
func status(class, rv string, generation int64, versions ...string) unstructured.Unstructured {
	var objects []any
	for i := 0; i+1 < len(versions); i += 2 {
		objects = append(objects, map[string]any{"id": versions[i], "version": versions[i+1]})
	}
	u := unstructured.Unstructured{Object: map[string]any{"status": map[string]any{
		"secretProviderClassName": class, "mounted": true, "podName": "p", "objects": objects,
	}}}
	u.SetResourceVersion(rv)
	u.SetGeneration(generation)
	return u
}

func TestCSIVersions(t *testing.T) {
	for _, tc := range []struct {
		name        string
		items       []unstructured.Unstructured
		keepPending bool
		want        map[string]string
	}{
		{"no pod yet", nil, false, map[string]string{}},
		{"one mount", []unstructured.Unstructured{status("db", "10", 1, "secret/a", "v1")}, false, map[string]string{"secret/a": "v1"}},
		{"the last write wins, in resourceVersion order (not string order)", []unstructured.Unstructured{
			status("db", "100", 2, "secret/a", "v2"), status("db", "99", 1, "secret/a", "v1"),
		}, false, map[string]string{"secret/a": "v2"}},
		{"a new pod mounting after a rotation records the same versions", []unstructured.Unstructured{
			status("db", "100", 2, "secret/a", "v2"), status("db", "120", 1, "secret/a", "v2"),
		}, false, map[string]string{"secret/a": "v2"}},
		{"another class's status is not read", []unstructured.Unstructured{
			status("db", "10", 1, "secret/a", "v1"), status("other", "20", 2, "secret/a", "v9"),
		}, false, map[string]string{"secret/a": "v1"}},
		{"pending stays pending over first mounts", []unstructured.Unstructured{
			status("db", "10", 1, "secret/a", "v1"), status("db", "11", 1, "secret/a", "v1"),
		}, true, map[string]string{}},
		{"pending ends with a rotation", []unstructured.Unstructured{
			status("db", "10", 2, "secret/a", "v2"), status("db", "11", 1, "secret/a", "v1"),
		}, true, map[string]string{"secret/a": "v1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := csiVersions(tc.items, "db", tc.keepPending); !maps.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestLookupOverCSI: the webhook's reads and explain's give one digest for a class whose
// stored stamp holds "no versions yet" and whose pods only mounted it.
func TestLookupOverCSI(t *testing.T) {
	gv := schema.GroupVersion{Group: "secrets-store.csi.x-k8s.io", Version: "v1"}
	scheme := runtime.NewScheme()
	scheme.AddKnownTypeWithName(gv.WithKind("SecretProviderClass"), &unstructured.Unstructured{})
	scheme.AddKnownTypeWithName(gv.WithKind("SecretProviderClassList"), &unstructured.UnstructuredList{})
	scheme.AddKnownTypeWithName(gv.WithKind("SecretProviderClassPodStatus"), &unstructured.Unstructured{})
	scheme.AddKnownTypeWithName(gv.WithKind("SecretProviderClassPodStatusList"), &unstructured.UnstructuredList{})
	spc := &unstructured.Unstructured{}
	spc.SetGroupVersionKind(gv.WithKind("SecretProviderClass"))
	spc.SetNamespace("ns")
	spc.SetName("db")
	st := status("db", "", 1, "secret/a", "v1")
	st.SetGroupVersionKind(gv.WithKind("SecretProviderClassPodStatus"))
	st.SetNamespace("ns")
	st.SetName("p-ns-db")
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(spc, &st).Build()
	key := stamp.NamespaceKey([]byte("0123456789abcdef0123456789abcdef"), "ns")
	srcs := stamp.Consumed(nil, &corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
		Driver: stamp.CSIDriver, VolumeAttributes: map[string]string{stamp.CSIClassAttribute: "db"}}}}}}, stamp.Options{CSISecrets: true})
	pending := "secretproviderclass/db=" + csiPending(srcs[0], key)
	for _, tc := range []struct {
		stored      string
		wantPending bool
	}{{pending, true}, {"", false}} {
		got, err := stamp.Compute(context.Background(), srcs, LookupOver(c, "ns", tc.stored, key), key)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(got.SourcesAnnotation(), "missing") {
			t.Fatalf("the class reads as missing: %s", got.SourcesAnnotation())
		}
		if isPending := got.SourcesAnnotation() == pending; isPending != tc.wantPending {
			t.Errorf("stored %q: sources %q, pending %v, want %v", tc.stored, got.SourcesAnnotation(), isPending, tc.wantPending)
		}
		keyFn := func() []byte { return []byte("0123456789abcdef0123456789abcdef") }
		webhook, err := (&Reader{Client: c, Key: keyFn}).StampOver(context.Background(), "ns", srcs, tc.stored)
		if err != nil {
			t.Fatal(err)
		}
		if webhook.Hash != got.Hash {
			t.Errorf("stored %q: the webhook's hash %s, explain's %s", tc.stored, webhook.Hash, got.Hash)
		}
	}
}
