// Package configread adapts a controller-runtime reader to the stamp core, so that the
// webhook and the watcher compute stamps with exactly the same code.
package configread

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
)

// Lookup reads ConfigMaps of one namespace through r. Pass an uncached reader
// (manager.GetAPIReader()): a cache can lag behind a write made a moment ago.
func Lookup(r client.Reader, namespace string) stamp.Lookup {
	return func(ctx context.Context, name string) (*corev1.ConfigMap, error) {
		var cm corev1.ConfigMap
		err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &cm)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return &cm, nil
	}
}

// Stamp computes the stamp a pod spec in namespace should carry, reading its ConfigMaps
// through r under timeout (no deadline when timeout is 0).
func Stamp(ctx context.Context, r client.Reader, namespace string, spec *corev1.PodSpec, timeout time.Duration) (stamp.Stamp, error) {
	srcs := stamp.References(spec)
	if len(srcs) == 0 {
		return stamp.Stamp{}, nil
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return stamp.Compute(ctx, srcs, Lookup(r, namespace))
}
