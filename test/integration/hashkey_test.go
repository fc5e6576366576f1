package integration

import (
	"bytes"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configstamp/configstamp/internal/hashkey"
)

// replicas is how many callers race for one key, as configstamp's replicas do at start.
const replicas = 8

// ensureConcurrently calls hashkey.Ensure from replicas goroutines at once and asserts
// that they all got the same key, which it returns.
func ensureConcurrently(t *testing.T, ref types.NamespacedName) []byte {
	t.Helper()
	keys := make([][]byte, replicas)
	errs := make([]error, replicas)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() {
			<-start
			keys[i], errs[i] = hashkey.Ensure(bg, k8s, ref)
		})
	}
	close(start)
	wg.Wait()
	for i := range replicas {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		if len(keys[i]) != hashkey.Size {
			t.Fatalf("replica %d: key of %d bytes", i, len(keys[i]))
		}
		if !bytes.Equal(keys[i], keys[0]) {
			t.Fatalf("replica %d got a different key from replica 0", i)
		}
	}
	return keys[0]
}

func storedKey(t *testing.T, ref types.NamespacedName) []byte {
	t.Helper()
	var s corev1.Secret
	if err := k8s.Get(bg, ref, &s); err != nil {
		t.Fatalf("get secret %s: %v", ref, err)
	}
	return s.Data[hashkey.DataKey]
}

// TestHashKeyConverges runs the real optimistic concurrency of the API server: replicas
// racing to create the key Secret, or to repair one without a key, all end with one key;
// deleting the Secret rotates it.
func TestHashKeyConverges(t *testing.T) {
	t.Parallel()
	ns := env.NewNamespace(t, false)

	t.Run("Create", func(t *testing.T) {
		ref := types.NamespacedName{Namespace: ns, Name: "hash-key"}
		key := ensureConcurrently(t, ref)
		if !bytes.Equal(storedKey(t, ref), key) {
			t.Fatal("the key returned is not the key stored")
		}
		again, err := hashkey.Ensure(bg, k8s, ref)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, key) {
			t.Fatal("a second call returned a different key")
		}

		if err := k8s.Delete(bg, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ref.Name}}); err != nil {
			t.Fatal(err)
		}
		rotated := ensureConcurrently(t, ref)
		if bytes.Equal(rotated, key) {
			t.Fatal("deleting the secret did not rotate the key")
		}
		if !bytes.Equal(storedKey(t, ref), rotated) {
			t.Fatal("the rotated key returned is not the key stored")
		}
	})

	t.Run("Repair", func(t *testing.T) {
		ref := types.NamespacedName{Namespace: ns, Name: "hash-key-empty"}
		create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ref.Name},
			Data: map[string][]byte{hashkey.DataKey: {}, "other": []byte("kept")}})
		key := ensureConcurrently(t, ref)
		var s corev1.Secret
		if err := k8s.Get(bg, ref, &s); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(s.Data[hashkey.DataKey], key) {
			t.Fatal("the key returned is not the key stored")
		}
		if string(s.Data["other"]) != "kept" {
			t.Fatalf("other data lost: %v", s.Data)
		}
	})
}
