package watcher

import (
	"context"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/workload"
)

// consumerLookups are the source index lookups of the workload kinds set up so far
// (addSourceIndex), by kind; a kind set up without one (a namespaced install's cache of
// several namespaces) is listed through the field index SourceIndex. Kinds may be set up
// later (a CRD installed), so it is locked.
type consumerLookups struct {
	mu sync.RWMutex
	by map[string]func(key string) ([]client.Object, error)
}

func (c *consumerLookups) set(k *workload.Kind, lookup func(key string) ([]client.Object, error)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[string]func(string) ([]client.Object, error){}
	}
	c.by[k.Kind] = lookup
}

// consumers are the workloads of kind k in namespace that consume the source key (an
// indexKey), as cache holds them: never to be written. A nil c lists through the field
// index.
func (c *consumerLookups) consumers(ctx context.Context, cache client.Reader, k *workload.Kind, namespace, key string) ([]client.Object, error) {
	var lookup func(string) ([]client.Object, error)
	if c != nil {
		c.mu.RLock()
		lookup = c.by[k.Kind]
		c.mu.RUnlock()
	}
	return consumersOf(ctx, cache, lookup, k.NewList, k.Items, namespace, key)
}

// consumersOf is the one lookup of a source's consumers of one kind: lookup when the
// kind's informer holds the index itself, else a List by the field index.
func consumersOf(ctx context.Context, cache client.Reader, lookup func(key string) ([]client.Object, error),
	newList func() client.ObjectList, items func(client.ObjectList) []client.Object, namespace, key string) ([]client.Object, error) {
	if lookup != nil {
		return lookup(key)
	}
	list := newList()
	if err := cache.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{SourceIndex: key}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	return items(list), nil
}
