package configread

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

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

// keep is a stored stamp of the class that versions (id, version, ...) give; none: "no
// versions yet".
func keep(versions ...string) func(map[string]string) bool {
	want := map[string]string{}
	for i := 0; i+1 < len(versions); i += 2 {
		want[versions[i]] = versions[i+1]
	}
	return func(got map[string]string) bool { return maps.Equal(got, want) }
}

// classStatuses are the statuses among items that record a mount of class.
func classStatuses(items []unstructured.Unstructured, class string) []podStatus {
	var out []podStatus
	for i := range items {
		if c, st, ok := mountedStatus(&items[i]); ok && c == class {
			out = append(out, st)
		}
	}
	return out
}

func TestCSIVersions(t *testing.T) {
	type sts = []unstructured.Unstructured
	pending := map[string]string{}
	for _, tc := range []struct {
		name  string
		items sts
		keeps func(map[string]string) bool
		want  map[string]string
	}{
		{"no pod yet", nil, nil, pending},
		{"mounts alone give no versions yet", sts{status("db", "10", 1, "secret/a", "v1")}, nil, pending},
		{"another class's rotation is not read", sts{status("db", "10", 1, "secret/a", "v1"), status("other", "20", 2, "secret/a", "v9")}, nil, pending},
		{"a rotation gives its versions", sts{status("db", "10", 1, "secret/a", "v1"), status("db", "11", 2, "secret/a", "v2")}, keep(), map[string]string{"secret/a": "v2"}},
		{"the latest rotation wins, in resourceVersion order (not string order)", sts{
			status("db", "100", 2, "secret/a", "v3"), status("db", "99", 2, "secret/a", "v2"),
		}, keep("secret/a", "v2"), map[string]string{"secret/a": "v3"}},
		{"no versions yet stays over first mounts", sts{status("db", "10", 1, "secret/a", "v1"), status("db", "11", 1, "secret/a", "v1")}, keep(), pending},
		// A provider giving each pod its own versions (Vault dynamic secrets): new pods'
		// mounts never move the stamp (the old rule rolled each new pod's workload again).
		{"per-pod versions: mounts keep the stored versions", sts{
			status("db", "10", 1, "secret/a", "pod1"), status("db", "11", 1, "secret/a", "pod2"), status("db", "12", 1, "secret/a", "pod3"),
		}, keep("secret/a", "pod1"), map[string]string{"secret/a": "pod1"}},
		{"per-pod versions: a stamp made over other pods' mounts (at create) is no versions yet", sts{
			status("db", "10", 1, "secret/a", "pod1"), status("db", "11", 1, "secret/a", "pod2"),
		}, nil, pending},
		// A rotation reaches pods one by one.
		{"first pod rotated, others not yet: rolls", sts{
			status("db", "10", 1, "secret/a", "v1"), status("db", "11", 1, "secret/a", "v1"), status("db", "20", 2, "secret/a", "v2"),
		}, keep("secret/a", "v1"), map[string]string{"secret/a": "v2"}},
		{"a pod mounting after the first rotation does not hide it", sts{
			status("db", "10", 1, "secret/a", "v1"), status("db", "20", 2, "secret/a", "v2"), status("db", "21", 1, "secret/a", "v2"),
		}, keep("secret/a", "v1"), map[string]string{"secret/a": "v2"}},
		{"rolled: new pods' mounts and late rotations of old pods keep it", sts{
			status("db", "10", 1, "secret/a", "v1"), status("db", "20", 2, "secret/a", "v2"), status("db", "21", 1, "secret/a", "v2"), status("db", "30", 2, "secret/a", "v2"),
		}, keep("secret/a", "v2"), map[string]string{"secret/a": "v2"}},
		// The rotated statuses of the rolled pods are gone; a finished pod's status
		// rotated long ago (the driver skips finished pods) must not take it back.
		{"an older rotation left behind cannot take the stamp back", sts{
			status("db", "5", 2, "secret/a", "v2"), status("db", "40", 1, "secret/a", "v3"), status("db", "41", 1, "secret/a", "v3"),
		}, keep("secret/a", "v3"), map[string]string{"secret/a": "v3"}},
		{"a stale mount after a rotation (provider lag) keeps the stamp until a later rotation", sts{
			status("db", "20", 2, "secret/a", "v2"), status("db", "21", 1, "secret/a", "v1"),
		}, keep("secret/a", "v1"), map[string]string{"secret/a": "v1"}},
		{"... which the stale pod's own rotation then brings", sts{
			status("db", "20", 2, "secret/a", "v2"), status("db", "30", 2, "secret/a", "v2"),
		}, keep("secret/a", "v1"), map[string]string{"secret/a": "v2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := csiVersions(classStatuses(tc.items, "db"), tc.keeps); !maps.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestLookupOverCSI: the webhook's reads and explain's give one digest for a class whose
// pods only mounted it, over a stored stamp of "no versions yet", of the mounted
// versions (kept), or none.
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
	digest := func(versions map[string]string) string {
		return "secretproviderclass/db=" + stamp.SourceDigest(srcs[0], &corev1.ConfigMap{Data: versions}, key).Hex()[:12]
	}
	pending, v1 := digest(map[string]string{}), digest(map[string]string{"secret/a": "v1"})
	for _, tc := range []struct {
		stored, want string
	}{{pending, pending}, {v1, v1}, {"", pending}} {
		got, err := stamp.Compute(context.Background(), srcs, LookupOver(c, "ns", tc.stored, key), key)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(got.SourcesAnnotation(), "missing") {
			t.Fatalf("the class reads as missing: %s", got.SourcesAnnotation())
		}
		if got.SourcesAnnotation() != tc.want {
			t.Errorf("stored %q: sources %q, want %q", tc.stored, got.SourcesAnnotation(), tc.want)
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

// TestStampListsStatusesOnce: a stamp of a workload mounting two classes lists the
// namespace's pod statuses once (the webhook does it at each admission), and still
// reads each class's own versions.
func TestStampListsStatusesOnce(t *testing.T) {
	gv := schema.GroupVersion{Group: "secrets-store.csi.x-k8s.io", Version: "v1"}
	scheme := runtime.NewScheme()
	for _, kind := range []string{"SecretProviderClass", "SecretProviderClassPodStatus"} {
		scheme.AddKnownTypeWithName(gv.WithKind(kind), &unstructured.Unstructured{})
		scheme.AddKnownTypeWithName(gv.WithKind(kind+"List"), &unstructured.UnstructuredList{})
	}
	var objs []client.Object
	var vols []corev1.Volume
	for _, class := range []string{"a", "b"} {
		spc := &unstructured.Unstructured{}
		spc.SetGroupVersionKind(gv.WithKind("SecretProviderClass"))
		spc.SetNamespace("ns")
		spc.SetName(class)
		st := status(class, "", 1, "secret/x", "v-"+class)
		st.SetGroupVersionKind(gv.WithKind("SecretProviderClassPodStatus"))
		st.SetNamespace("ns")
		st.SetName("p-ns-" + class)
		objs = append(objs, spc, &st)
		vols = append(vols, corev1.Volume{Name: class, VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
			Driver: stamp.CSIDriver, VolumeAttributes: map[string]string{stamp.CSIClassAttribute: class}}}})
	}
	var lists atomic.Int32
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			lists.Add(1)
			return c.List(ctx, list, opts...)
		}}).Build()
	srcs := stamp.Consumed(nil, &corev1.PodSpec{Volumes: vols}, stamp.Options{CSISecrets: true})
	secret := []byte("0123456789abcdef0123456789abcdef")
	// Stored stamps of each class's own versions: kept only if each class read its own.
	key := stamp.NamespaceKey(secret, "ns")
	stored := ""
	for i, class := range []string{"a", "b"} {
		d := stamp.SourceDigest(srcs[i], &corev1.ConfigMap{Data: map[string]string{"secret/x": "v-" + class}}, key)
		stored += fmt.Sprintf("secretproviderclass/%s=%s,", class, d.Hex()[:12])
	}
	st, err := (&Reader{Client: c, Key: func() []byte { return secret }}).StampOver(context.Background(), "ns", srcs, strings.TrimSuffix(stored, ","))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.SourcesAnnotation(); got != strings.TrimSuffix(stored, ",") {
		t.Errorf("sources %q, want each class's own versions kept: %q", got, stored)
	}
	if n := lists.Load(); n != 1 {
		t.Errorf("%d lists of the pod statuses, want 1", n)
	}
}
