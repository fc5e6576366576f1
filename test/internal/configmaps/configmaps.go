// Package configmaps holds the ConfigMap fixtures the test layers share: create, patch,
// change one key, delete and read a ConfigMap through an admin client, each failing the
// test on an error, and a lookup of the live ConfigMaps for test/hashdoc.
package configmaps

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var bg = context.Background()

// Create creates a ConfigMap with data (and binaryData when given).
func Create(t testing.TB, c client.Client, ns, name string, data map[string]string, binary map[string][]byte) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data, BinaryData: binary}
	if err := c.Create(bg, cm); err != nil {
		t.Fatalf("create configmap %s/%s: %v", ns, name, err)
	}
}

// Patch merge-patches a ConfigMap.
func Patch(t testing.TB, c client.Client, ns, name, patch string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := c.Patch(bg, cm, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatalf("patch configmap %s/%s: %v", ns, name, err)
	}
}

// SetData replaces one key of a ConfigMap (a merge patch: no conflicts).
func SetData(t testing.TB, c client.Client, ns, name, key, value string) {
	t.Helper()
	Patch(t, c, ns, name, fmt.Sprintf(`{"data":{%q:%q}}`, key, value))
}

// Delete deletes a ConfigMap.
func Delete(t testing.TB, c client.Client, ns, name string) {
	t.Helper()
	if err := c.Delete(bg, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
		t.Fatalf("delete configmap %s/%s: %v", ns, name, err)
	}
}

// Get reads a ConfigMap as it is now; nil when there is none.
func Get(t testing.TB, c client.Client, ns, name string) *corev1.ConfigMap {
	t.Helper()
	var cm corev1.ConfigMap
	if err := c.Get(bg, client.ObjectKey{Namespace: ns, Name: name}, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		t.Fatalf("get configmap %s/%s: %v", ns, name, err)
	}
	return &cm
}

// Lookup reads the ConfigMaps of ns as they are now, by name (nil when there is none):
// the lookup test/hashdoc recomputes a documented hash from.
func Lookup(t testing.TB, c client.Client, ns string) func(name string) *corev1.ConfigMap {
	return func(name string) *corev1.ConfigMap {
		t.Helper()
		return Get(t, c, ns, name)
	}
}
