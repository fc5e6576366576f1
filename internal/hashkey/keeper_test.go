package hashkey

import (
	"bytes"
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"
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
