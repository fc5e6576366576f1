package hashkey

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// A Keeper follows the Secret: a replaced key, and a deleted Secret (re-created with a
// new key), reach Key within a refresh.
func TestKeeperFollowsTheSecret(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := fake.NewClientBuilder().Build()
	k := &Keeper{Client: c, Ref: ref, Refresh: 10 * time.Millisecond}
	if k.Key() != nil {
		t.Fatal("a key before Load")
	}
	if err := k.Load(ctx); err != nil {
		t.Fatal(err)
	}
	first := k.Key()
	if len(first) != Size || !bytes.Equal(first, get(t, c).Data[DataKey]) {
		t.Fatalf("loaded key %x, Secret holds %x", first, get(t, c).Data[DataKey])
	}
	go func() { _ = k.Start(ctx) }()

	s := get(t, c)
	s.Data[DataKey] = bytes.Repeat([]byte{7}, Size)
	if err := c.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	waitKey(t, k, func(key []byte) bool { return bytes.Equal(key, bytes.Repeat([]byte{7}, Size)) })

	if err := c.Delete(ctx, get(t, c)); err != nil {
		t.Fatal(err)
	}
	waitKey(t, k, func(key []byte) bool {
		return len(key) == Size && !bytes.Equal(key, bytes.Repeat([]byte{7}, Size)) && !bytes.Equal(key, first)
	})
	if !bytes.Equal(k.Key(), get(t, c).Data[DataKey]) {
		t.Fatal("the Keeper's key is not the re-created Secret's")
	}
}

func waitKey(t *testing.T, k *Keeper, ok func([]byte) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok(k.Key()) {
		if time.Now().After(deadline) {
			t.Fatalf("key not as expected within 5s: %x", k.Key())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Fresh reads the key again at most once per MinReread, however often records and
// nudges under another key (anyone's to forge) ask, never waits for a read that runs,
// and reports a key read within MinReread as fresh.
func TestKeeperFreshIsRateLimited(t *testing.T) {
	ctx := context.Background()
	var gets atomic.Int32
	block := make(chan struct{})
	blocking := atomic.Bool{}
	c := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			gets.Add(1)
			if blocking.Load() {
				<-block
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	k := &Keeper{Client: c, Ref: ref}
	beforeLoad := time.Now()
	if err := k.Load(ctx); err != nil {
		t.Fatal(err)
	}
	loaded := gets.Load()
	// Loaded after since: fresh, nothing read.
	for range 100 {
		if !k.Fresh(ctx, beforeLoad) {
			t.Fatal("a key read after since is not fresh")
		}
	}
	if n := gets.Load() - loaded; n != 0 {
		t.Fatalf("%d reads of a key read a moment ago", n)
	}

	// Rotated behind its back: once MinReread is over, one read finds the new key.
	s := get(t, c)
	rotated := bytes.Repeat([]byte{9}, Size)
	s.Data[DataKey] = rotated
	if err := c.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	// A read a moment before since (before the rotation, say) is not fresh: one read,
	// which answers every caller whose since it follows.
	since := time.Now()
	before := gets.Load()
	for range 100 {
		if !k.Fresh(ctx, since) {
			t.Fatal("not fresh after a read")
		}
	}
	if n := gets.Load() - before; n != 1 {
		t.Fatalf("%d reads for 100 calls, want 1", n)
	}
	if !bytes.Equal(k.Key(), rotated) {
		t.Fatal("Fresh did not take the rotated key")
	}

	// While a read runs, others do not wait and do not read: not fresh.
	k.mu.Lock()
	k.read, k.tried = time.Now().Add(-MinReread), time.Time{}
	k.mu.Unlock()
	blocking.Store(true)
	done := make(chan bool)
	since = time.Now()
	go func() { done <- k.Fresh(ctx, since) }()
	for gets.Load() == before+1 {
		time.Sleep(time.Millisecond)
	}
	for range 100 {
		if k.Fresh(ctx, since) {
			t.Fatal("fresh while the read runs")
		}
	}
	blocking.Store(false)
	close(block)
	if !<-done {
		t.Fatal("the read that ran is not fresh")
	}
	if n := gets.Load() - before; n != 2 {
		t.Fatalf("%d reads, want 2", n)
	}

	// A read that fails is not tried again within MinReread.
	k.mu.Lock()
	k.read, k.tried = time.Now().Add(-MinReread), time.Now()
	k.mu.Unlock()
	if k.Fresh(ctx, time.Now()) || gets.Load()-before != 2 {
		t.Fatal("read again within MinReread of the last try")
	}
}
