package watcher

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
)

// optedIn reports whether namespace carries the opt-in label (label=enabled). It reads
// Namespace metadata from the manager's cache.
func optedIn(ctx context.Context, c client.Reader, namespace, label string) (bool, error) {
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := c.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("get namespace %s: %w", namespace, err)
	}
	return ns.Labels[label] == stamp.InjectValue, nil
}

// keySet is a concurrent set of object keys.
type keySet struct{ m sync.Map }

func (s *keySet) add(k types.NamespacedName) { s.m.Store(k, struct{}{}) }

// take removes k and reports whether it was present.
func (s *keySet) take(k types.NamespacedName) bool {
	_, ok := s.m.LoadAndDelete(k)
	return ok
}
