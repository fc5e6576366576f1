package watcher

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/stamp"
)

// statusObject is an object of a source kind's Statuses resource (the CSI driver's
// SecretProviderClassPodStatus), to watch.
func statusObject(k *stamp.SourceKind) client.Object {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(k.Group + "/" + k.Version)
	u.SetKind("SecretProviderClassPodStatus")
	return u
}

// statusClass is the SecretProviderClass a pod status records ("" when none), and the
// object versions it records.
func statusClass(obj client.Object) (types.NamespacedName, any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return types.NamespacedName{}, nil
	}
	class, _, _ := unstructured.NestedString(u.Object, "status", "secretProviderClassName")
	objects, _, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "objects")
	return types.NamespacedName{Namespace: u.GetNamespace(), Name: class}, objects
}

// statusEvents maps the driver's pod statuses to their class: a status written by a
// mount (created) or whose object versions changed (a rotation) checks the class's
// dependents once it is quiet. Nothing else of a status counts: not its deletion (a pod
// gone brings no new version), not the initial list (nothing changed), not a write that
// keeps the versions.
func (r *sourceReconciler) statusEvents() handler.Funcs {
	enqueue := func(key types.NamespacedName, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if key.Name == "" {
			return
		}
		r.debounce.touch(key, true)
		q.AddAfter(reconcile.Request{NamespacedName: key}, r.quiet)
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.IsInInitialList {
				return
			}
			key, _ := statusClass(e.Object)
			enqueue(key, q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			oldKey, oldObjects := statusClass(e.ObjectOld)
			key, objects := statusClass(e.ObjectNew)
			if oldKey == key && equality.Semantic.DeepEqual(oldObjects, objects) {
				return
			}
			enqueue(key, q)
		},
	}
}
