package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/stamp"
)

// contentCounter serves unchanged ConfigMaps and counts the reads of their content
// (a metadata-only read is a PartialObjectMetadata).
type contentCounter struct{ content atomic.Int64 }

func (c *contentCounter) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	meta := metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, UID: types.UID("uid-" + key.Name), ResourceVersion: "1"}
	switch o := obj.(type) {
	case *metav1.PartialObjectMetadata:
		o.ObjectMeta = meta
	case *corev1.ConfigMap:
		c.content.Add(1)
		o.ObjectMeta, o.Data = meta, map[string]string{"app.yaml": key.Name}
	default:
		return fmt.Errorf("unexpected read of %T", obj)
	}
	return nil
}

func (c *contentCounter) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return fmt.Errorf("unexpected list")
}

// TestDigestCacheHoldsAFanOut: the digest cache every role builds (the webhook's too:
// the watcher's nudges are reviewed there) holds the sources of 10,000 workloads, so a
// second sweep over them (a fan-out, a rollout storm) reads each by its metadata, not
// its content. A cache smaller than the sweep misses every source.
func TestDigestCacheHoldsAFanOut(t *testing.T) {
	const sources = 10000
	o, err := parse() // the default --digest-cache-entries
	if err != nil {
		t.Fatal(err)
	}
	counter := &contentCounter{}
	key := []byte("0123456789abcdef0123456789abcdef")
	r := &configread.Reader{Client: counter, Cache: newDigestCache(o.bounds.digestCacheEntries), Key: func() []byte { return key }, KeyDigests: true}
	sweep := func() {
		for i := range sources {
			src := stamp.Source{Kind: stamp.KindConfigMap, Name: fmt.Sprintf("cm-%05d", i), AllKeys: true}
			if _, err := r.Stamp(context.Background(), "default", []stamp.Source{src}); err != nil {
				t.Fatal(err)
			}
		}
	}
	sweep()
	first := counter.content.Load()
	sweep()
	if again := counter.content.Load() - first; again != 0 {
		t.Errorf("the second sweep over %d unchanged sources read %d of them in full (first sweep: %d)", sources, again, first)
	}
}

// TestFlagsDigestCacheEntries: --digest-cache-entries sets the bound; 0 (no bound at all
// for the LRU) and less are refused.
func TestFlagsDigestCacheEntries(t *testing.T) {
	if o, err := parse("--digest-cache-entries", "50000"); err != nil || o.bounds.digestCacheEntries != 50000 {
		t.Errorf("--digest-cache-entries 50000: %v", err)
	}
	for _, v := range []string{"0", "-1"} {
		if _, err := parse("--digest-cache-entries", v); err == nil {
			t.Errorf("--digest-cache-entries %s accepted", v)
		}
	}
}
