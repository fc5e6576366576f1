package watcher

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// driverStatus is a SecretProviderClassPodStatus as the CSI driver writes one for pod
// of class, recording objects id -> version.
func driverStatus(i int, class string, objects ...string) *unstructured.Unstructured {
	pod := fmt.Sprintf("app-7d9f8b6c5-%05d", i)
	var objs []any
	for j := 0; j+1 < len(objects); j += 2 {
		objs = append(objs, map[string]any{"id": objects[j], "version": objects[j+1]})
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "secrets-store.csi.x-k8s.io/v1",
		"kind":       "SecretProviderClassPodStatus",
		"metadata": map[string]any{
			"name": pod + "-ns-" + class, "namespace": "ns", "uid": fmt.Sprintf("6f1c0a7e-0000-4000-8000-%012d", i),
			"resourceVersion": fmt.Sprint(1000 + i), "generation": int64(2), "creationTimestamp": "2026-12-01T10:00:00Z",
			"labels":          map[string]any{"internal.secrets-store.csi.k8s.io/node-name": "node-17", "secrets-store.csi.k8s.io/pod-name": pod},
			"ownerReferences": []any{map[string]any{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": "9e0c2b1d-1111-4000-8000-000000000001"}},
			"managedFields": []any{map[string]any{"manager": "secrets-store-csi-driver", "operation": "Update", "apiVersion": "secrets-store.csi.x-k8s.io/v1",
				"time": "2026-12-01T10:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": map[string]any{"f:status": map[string]any{
					".": map[string]any{}, "f:mounted": map[string]any{}, "f:objects": map[string]any{}, "f:podName": map[string]any{},
					"f:secretProviderClassName": map[string]any{}, "f:targetPath": map[string]any{}}}}},
		},
		"status": map[string]any{
			"podName": pod, "secretProviderClassName": class, "mounted": true,
			"targetPath": "/var/lib/kubelet/pods/9e0c2b1d-1111-4000-8000-000000000001/volumes/kubernetes.io~csi/secrets/mount",
			"objects":    objs,
		},
	}}
	return u
}

// TestTrimForCachePodStatus: the cache keeps of a CSI pod status what the watcher
// reads (namespace, class, a digest of its objects) and what the informer needs (name,
// uid, resourceVersion); not the pod's name, target path, labels, owners or
// managedFields. The object handed in is not written; a trimmed one passes as it is
// (informers re-transform); the watcher reads the same class and digest of both, and a
// rotation (a version changed) still changes the digest. A status of any size is kept
// in a few hundred bytes.
func TestTrimForCachePodStatus(t *testing.T) {
	in := driverStatus(1, "db", "secret/password", "v7", "secret/user", "v2")
	orig := in.DeepCopy()
	out, err := TrimForCache()(in)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := out.(*unstructured.Unstructured)
	if !ok {
		t.Fatalf("got %T", out)
	}
	wantClass, wantDigest := statusClass(orig)
	want := map[string]any{
		"apiVersion": "secrets-store.csi.x-k8s.io/v1",
		"kind":       "SecretProviderClassPodStatus",
		"metadata": map[string]any{
			"name": "app-7d9f8b6c5-00001-ns-db", "namespace": "ns", "uid": "6f1c0a7e-0000-4000-8000-000000000001", "resourceVersion": "1001",
		},
		"status": map[string]any{"secretProviderClassName": "db", keptDigest: wantDigest},
	}
	if !reflect.DeepEqual(got.Object, want) {
		t.Errorf("kept %v\nwant %v", got.Object, want)
	}
	if !reflect.DeepEqual(in.Object, orig.Object) {
		t.Error("the object handed in was written to")
	}
	if class, digest := statusClass(got); class != wantClass || digest != wantDigest || digest == "" {
		t.Errorf("statusClass of the trimmed status: %v %q, want %v %q", class, digest, wantClass, wantDigest)
	}
	if again, _ := TrimForCache()(got); again != any(got) {
		t.Error("a trimmed status was copied again")
	}
	// The informer compares the trimmed old and new statuses: a rotation of either
	// object, or an object added, is a difference; the same versions are not.
	for _, c := range []struct {
		objects []string
		differs bool
	}{
		{[]string{"secret/password", "v7", "secret/user", "v2"}, false},
		{[]string{"secret/password", "v8", "secret/user", "v2"}, true},
		{[]string{"secret/password", "v7", "secret/user", "v3"}, true},
		{[]string{"secret/password", "v7", "secret/user", "v2", "secret/key", "v1"}, true},
	} {
		next, _ := TrimForCache()(driverStatus(1, "db", c.objects...))
		if _, digest := statusClass(next.(*unstructured.Unstructured)); (digest != wantDigest) != c.differs {
			t.Errorf("objects %v: digest %q against %q, want differing %v", c.objects, digest, wantDigest, c.differs)
		}
	}

	// Bad input: trimmed in shape, no panic; a status of no class or no objects keeps
	// what it has.
	for _, status := range []any{nil, "x", map[string]any{"objects": "x"}, map[string]any{"objects": []any{"x", nil, map[string]any{"id": 1}}}} {
		u := driverStatus(2, "db")
		u.Object["status"] = status
		out, err := TrimForCache()(u)
		if err != nil {
			t.Fatal(err)
		}
		trimmed := out.(*unstructured.Unstructured)
		if _, ok := trimmed.Object["metadata"].(map[string]any)["labels"]; ok {
			t.Errorf("status %v: labels kept", status)
		}
		if again, _ := TrimForCache()(trimmed); again != any(trimmed) {
			t.Errorf("status %v: a trimmed status was copied again", status)
		}
	}

	// A status of 100,000 objects (as a tenant allowed to create statuses could write,
	// up to the API server's size limit): the cache keeps its digest, not its objects.
	var objects []string
	for i := range 100000 {
		objects = append(objects, fmt.Sprintf("secret/%06d", i), "v1")
	}
	huge, _ := TrimForCache()(driverStatus(3, "db", objects...))
	if b, err := json.Marshal(huge); err != nil || len(b) > 512 {
		t.Errorf("a status of 100,000 objects kept in %d bytes of JSON (%v), want at most 512", len(b), err)
	}

	// Other unstructured objects (an Argo Rollout) keep their content.
	r := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
		"metadata": map[string]any{"name": "r", "namespace": "ns"}, "spec": map[string]any{"replicas": int64(2)}}}
	out, _ = TrimForCache()(r)
	if _, ok := out.(*unstructured.Unstructured).Object["spec"]; !ok {
		t.Error("a Rollout's spec was dropped")
	}
}

// BenchmarkPodStatusCache reports the heap a cache holds per CSI pod status, whole
// (decoded as the driver writes one) and trimmed: BENCHMARKS.md's figure.
func BenchmarkPodStatusCache(b *testing.B) {
	const n = 10000
	for _, c := range []struct {
		name string
		keep func(*unstructured.Unstructured) any
	}{
		{"whole", func(u *unstructured.Unstructured) any { return u }},
		{"trimmed", func(u *unstructured.Unstructured) any { out, _ := TrimForCache()(u); return out }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				held := make([]any, n)
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for i := range held {
					held[i] = c.keep(driverStatus(i, "db", "secret/password", fmt.Sprintf("v%d", i%7), "secret/user", "v2"))
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/status")
				runtime.KeepAlive(held)
			}
		})
	}
}
