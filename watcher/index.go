package watcher

import (
	"context"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// SourceIndex indexes workloads by the sources their pods consume, as
// "kind/namespace/name", so a ConfigMap or Secret event finds its dependents without a
// LIST.
const SourceIndex = "configstamp.io/sources"

// indexSources returns the field index function of SourceIndex for one kind.
func indexSources(kind *workload.Kind, opts stamp.Options) client.IndexerFunc {
	return func(obj client.Object) []string {
		tmpl := kind.Template(obj)
		if tmpl == nil {
			return nil
		}
		srcs := stamp.Consumed(obj.GetAnnotations(), &tmpl.Spec, opts)
		keys := make([]string, 0, len(srcs))
		for _, s := range srcs {
			keys = append(keys, indexKey(s.Kind, obj.GetNamespace(), s.Name))
		}
		return keys
	}
}

func indexKey(kind, namespace, name string) string { return kind + "/" + namespace + "/" + name }

// indexedInformer is the informer the manager's cache makes (client-go's shared one):
// its store answers index lookups.
type indexedInformer interface {
	AddIndexers(toolscache.Indexers) error
	GetIndexer() toolscache.Indexer
}

// addSourceIndex adds SourceIndex to the informer of kind's workloads in c, and returns
// the lookup of the workloads that consume one source (an indexKey), as the cache holds
// them (not to be written). The index is the informer's own: each value is stored once,
// where controller-runtime's field index (IndexField) stores it twice, with and without
// the namespace, for lists across namespaces the watcher never makes (the key names the
// namespace).
// It also returns the store the kind's workloads are read from (workloadStore).
func addSourceIndex(ctx context.Context, c cache.Cache, kind *workload.Kind, opts stamp.Options) (func(key string) ([]client.Object, error), *workloadStore, error) {
	store := &workloadStore{kind: kind, cache: c}
	inf, err := c.GetInformer(ctx, kind.New())
	if err != nil {
		return nil, nil, err
	}
	ii, ok := inf.(indexedInformer)
	if !ok {
		// A cache of several namespaces (a namespaced install) holds an informer per
		// namespace behind one: controller-runtime's field index, looked up by List.
		return nil, store, c.IndexField(ctx, kind.New(), SourceIndex, indexSources(kind, opts))
	}
	if err := ii.AddIndexers(sourceIndexers(kind, opts)); err != nil {
		return nil, nil, err
	}
	store.indexer = ii.GetIndexer()
	return lookupBy(store.indexer), store, nil
}

// sourceIndexers is SourceIndex of kind's workloads as a client-go store's index.
func sourceIndexers(kind *workload.Kind, opts stamp.Options) toolscache.Indexers {
	fn := indexSources(kind, opts)
	return toolscache.Indexers{SourceIndex: func(o any) ([]string, error) {
		obj, ok := o.(client.Object)
		if !ok {
			return nil, nil
		}
		return fn(obj), nil
	}}
}

// lookupBy is the SourceIndex lookup of indexer.
func lookupBy(indexer toolscache.Indexer) func(key string) ([]client.Object, error) {
	return func(key string) ([]client.Object, error) {
		items, err := indexer.ByIndex(SourceIndex, key)
		if err != nil {
			return nil, err
		}
		return objectsOf(items), nil
	}
}

// objectsOf is the objects among an informer store's items.
func objectsOf(items []any) []client.Object {
	out := make([]client.Object, 0, len(items))
	for _, it := range items {
		if obj, ok := it.(client.Object); ok {
			out = append(out, obj)
		}
	}
	return out
}
