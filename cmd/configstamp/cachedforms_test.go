package main

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/workload"
)

// TestCompactOnlyWhereTheStoreIsRead: the manager's cache (setup.cacheOptions) keeps a
// workload.Cached only for kinds whose informer exposes its store, as the watcher reads
// them from it then (watcher.addSourceIndex makes a workloadStore on the indexer only
// for such an informer); else controller-runtime's cache reader refuses every typed read
// of them and the watcher checks nothing. Cluster-wide: compact and read from the store;
// namespaced (one namespace or several): typed, read through the cache.
func TestCompactOnlyWhereTheStoreIsRead(t *testing.T) {
	mapper := meta.NewDefaultRESTMapper(nil)
	for _, k := range workload.Watched(workload.Builtin()) {
		mapper.Add(k.GVK(), meta.RESTScopeNamespace)
	}
	for _, watched := range [][]string{nil, {"a"}, {"a", "b"}} {
		sc, err := scope.NewWatched("configstamp.io/inject", scope.DefaultExcluded, watched)
		if err != nil {
			t.Fatal(err)
		}
		opts := (&setup{scope: sc}).cacheOptions()
		opts.Scheme, opts.Mapper = scheme.Scheme, mapper
		c, err := cache.New(&rest.Config{Host: "https://127.0.0.1:1"}, opts) // never started: nothing is read
		if err != nil {
			t.Fatal(err)
		}
		compacts := 0
		for obj, by := range opts.ByObject {
			inf, err := c.GetInformer(context.Background(), obj, cache.BlockUntilSynced(false))
			if err != nil {
				t.Fatal(err)
			}
			// watcher.indexedInformer
			_, store := inf.(interface {
				AddIndexers(toolscache.Indexers) error
				GetIndexer() toolscache.Indexer
			})
			out, err := by.Transform(obj.DeepCopyObject())
			if err != nil {
				t.Fatal(err)
			}
			_, compact := out.(*workload.Cached)
			if compact && !store {
				t.Errorf("watched %v: %T cached as a workload.Cached, but its informer exposes no store to read it from", watched, obj)
			}
			if store != (len(watched) == 0) {
				t.Errorf("watched %v: %T informer exposes a store: %v", watched, obj, store)
			}
			if compact {
				compacts++
			}
		}
		if len(watched) == 0 && compacts == 0 {
			t.Errorf("cluster-wide: no kind cached compact")
		}
	}
}
