package watcher

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/workload"
)

// namespaceMeta reads a Namespace's metadata from the manager's cache; nil when it does
// not exist.
func namespaceMeta(ctx context.Context, c client.Reader, name string) (*metav1.PartialObjectMetadata, error) {
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := c.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get namespace %s: %w", name, err)
	}
	return ns, nil
}

// namespaceIn is the metadata of the namespace named name (nil when it does not exist)
// and whether sc includes it. A namespaced install reads no Namespace (it may not): the
// list decides, and the metadata is the name alone (no labels, no write time).
func namespaceIn(ctx context.Context, c client.Reader, sc *scope.Scope, name string) (*metav1.PartialObjectMetadata, bool, error) {
	if sc.Namespaced() {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name}}, sc.Includes(name, nil), nil
	}
	ns, err := namespaceMeta(ctx, c, name)
	if err != nil || ns == nil {
		return nil, false, err
	}
	return ns, sc.Includes(ns.Name, ns.Labels), nil
}

// inScope reports whether the registration sends admissions for the workload (its
// namespace opted in, or itself by its label): the watcher acts nowhere else (a nudge
// there could never be stamped).
func inScope(ctx context.Context, c client.Reader, sc *scope.Scope, obj client.Object) (bool, error) {
	ns, _, err := namespaceIn(ctx, c, sc, obj.GetNamespace())
	if err != nil || ns == nil {
		return false, err
	}
	return sc.IncludesWorkload(ns.Name, ns.Labels, obj.GetLabels()), nil
}

// namespaceEvents checks every dependent of one kind (a workload kind, HelmReleases) in
// a namespace that comes into scope (the opt-in label added), so each gets its record
// at once: the first config change after that is then judged precisely. The initial
// list is covered by the kind's own.
func namespaceEvents(sc *scope.Scope, c client.Reader, d dependentsOf) handler.TypedEventHandler[client.Object, reconcile.Request] {
	return handler.Funcs{
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			was := sc.Includes(e.ObjectOld.GetName(), e.ObjectOld.GetLabels())
			is := sc.Includes(e.ObjectNew.GetName(), e.ObjectNew.GetLabels())
			if was || !is {
				return
			}
			items, err := d.listIn(ctx, c, e.ObjectNew.GetName())
			if err != nil {
				logf.FromContext(ctx).Error(err, "List workloads of a namespace that opted in", "namespace", e.ObjectNew.GetName(), "kind", d.name)
				return
			}
			for _, obj := range items {
				key := client.ObjectKeyFromObject(obj)
				if d.hand != nil {
					d.hand(key, false)
				}
				q.Add(reconcile.Request{NamespacedName: key})
			}
		},
	}
}

// lastWrite is when the object was last written (workload.LastWrite): from its managed
// fields (metadata the watch carries, reduced to the latest time by the cache
// transform), or its creation time. Both are the API server's clock.
func lastWrite(obj metav1.Object) time.Time { return workload.LastWrite(obj) }
