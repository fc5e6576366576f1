package watcher

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/workload"
)

// workloadStore is the one way the watcher reads one kind's workloads from the cache.
// Where the kind's informer exposes its store (a cache of all namespaces), it reads the
// store itself: the cache may hold compact objects (workload.Cached), which
// controller-runtime's cache reader refuses for a typed Get or List. A namespaced
// install's cache (an informer per namespace behind one) holds typed trimmed objects,
// read through the cache. Objects are as the cache holds them: never to be written.
type workloadStore struct {
	kind    *workload.Kind
	indexer toolscache.Indexer // nil: read through cache
	cache   client.Reader
}

// get returns the workload key, a copy when copied (else the cache's own object).
func (s *workloadStore) get(ctx context.Context, key types.NamespacedName, copied bool) (client.Object, error) {
	if s.indexer == nil {
		obj := s.kind.New()
		var opts []client.GetOption
		if !copied {
			opts = append(opts, client.UnsafeDisableDeepCopy)
		}
		if err := s.cache.Get(ctx, key, obj, opts...); err != nil {
			return nil, err
		}
		return obj, nil
	}
	item, ok, err := s.indexer.GetByKey(key.String())
	if err != nil {
		return nil, err
	}
	obj, isObj := item.(client.Object)
	if !ok || !isObj {
		return nil, apierrors.NewNotFound(s.kind.GVR().GroupResource(), key.Name)
	}
	if copied {
		obj = obj.DeepCopyObject().(client.Object)
	}
	return obj, nil
}

// list returns the workloads of namespace ("": of all), as the cache holds them.
func (s *workloadStore) list(ctx context.Context, namespace string) ([]client.Object, error) {
	if s.indexer == nil {
		l := s.kind.NewList()
		if err := s.cache.List(ctx, l, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		return s.kind.Items(l), nil
	}
	var items []any
	if namespace == "" {
		items = s.indexer.List()
	} else {
		var err error
		if items, err = s.indexer.ByIndex(toolscache.NamespaceIndex, namespace); err != nil {
			return nil, err
		}
	}
	return objectsOf(items), nil
}

// store is r's workloadStore; without one (unit tests), reads through its client.
func (r *workloadReconciler) store() *workloadStore {
	if r.workloads != nil {
		return r.workloads
	}
	return &workloadStore{kind: r.kind, cache: r.client}
}
