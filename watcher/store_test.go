package watcher

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/configstamp/configstamp/internal/workload"
)

// TestWorkloadStoreReadsCompactObjects: the watcher's reads of a kind's workloads from
// an informer's store (as controller-runtime's informers make it: namespace-indexed)
// give the compact objects it holds, a copy when asked, not found when absent, and
// lists of one namespace or all.
func TestWorkloadStoreReadsCompactObjects(t *testing.T) {
	ctx := context.Background()
	idx := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	for _, key := range []types.NamespacedName{{Namespace: "a", Name: "x"}, {Namespace: "a", Name: "y"}, {Namespace: "b", Name: "x"}} {
		full := cfgDeployment()
		full.Namespace, full.Name = key.Namespace, key.Name
		full.Annotations = map[string]string{"configstamp.io/skip": "false"}
		if err := idx.Add(workload.Deployment.Compact(full, "")); err != nil {
			t.Fatal(err)
		}
	}
	s := &workloadStore{kind: workload.Deployment, indexer: idx}
	got, err := s.get(ctx, types.NamespacedName{Namespace: "a", Name: "y"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.(*workload.Cached); !ok || got.GetName() != "y" || got.GetNamespace() != "a" {
		t.Fatalf("got %T %s/%s", got, got.GetNamespace(), got.GetName())
	}
	got.GetAnnotations()["configstamp.io/skip"] = "true"
	if again, _ := s.get(ctx, types.NamespacedName{Namespace: "a", Name: "y"}, false); again.GetAnnotations()["configstamp.io/skip"] != "false" {
		t.Error("a copy shares its annotations with the store's object")
	}
	if _, err := s.get(ctx, types.NamespacedName{Namespace: "c", Name: "x"}, false); !apierrors.IsNotFound(err) {
		t.Errorf("absent: %v, want not found", err)
	}
	for ns, want := range map[string]int{"": 3, "a": 2, "b": 1, "c": 0} {
		items, err := s.list(ctx, ns)
		if err != nil || len(items) != want {
			t.Errorf("list %q: %d items (%v), want %d", ns, len(items), err, want)
		}
	}
	if gvk := got.GetObjectKind().GroupVersionKind(); gvk != workload.Deployment.GVK() {
		t.Errorf("a compact object's kind %v: Events need it", gvk)
	}
}
