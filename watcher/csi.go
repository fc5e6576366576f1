package watcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

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
	u.SetKind(k.StatusKind)
	return u
}

// statusClass is the SecretProviderClass a pod status records ("" when none), and a
// digest of the objects it records (objectsDigest; "" when none): a rotation changes it.
// It reads a status as the driver writes it and as the cache keeps it (trimPodStatus).
func statusClass(obj client.Object) (types.NamespacedName, string) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return types.NamespacedName{}, ""
	}
	class, _, _ := unstructured.NestedString(u.Object, "status", "secretProviderClassName")
	digest, _, _ := unstructured.NestedString(u.Object, "status", keptDigest)
	if objects, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "objects"); ok {
		digest = objectsDigest(objects)
	}
	return types.NamespacedName{Namespace: u.GetNamespace(), Name: class}, digest
}

// keptDigest is the field of a cached pod status's status holding objectsDigest of its
// objects, in their place.
const keptDigest = "objectsDigest"

// objectsDigest is the SHA-256 of a pod status's objects as JSON, whatever their shape
// (a status's objects are unbounded: any tenant allowed to create statuses could make
// the cache hold megabytes each). Objects decoded from JSON always encode.
func objectsDigest(objects any) string {
	h := sha256.New()
	if err := json.NewEncoder(h).Encode(objects); err != nil {
		return "unencodable"
	}
	return hex.EncodeToString(h.Sum(nil))
}

// trimPodStatus is a pod status as the cache keeps it: what statusClass reads (its
// namespace, class name and the digest of its objects) and what the informer needs
// (name, uid, resourceVersion). One is kept per pod and class, cluster-wide: the rest
// (the pod's name, target path, owner references, labels) would make the cache grow
// with the pods. configread reads the statuses live, never from the cache. u itself
// when it holds nothing more (as one already trimmed), else a new object: u is not
// written.
func trimPodStatus(u *unstructured.Unstructured) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: map[string]any{}}
	out.SetAPIVersion(u.GetAPIVersion())
	out.SetKind(u.GetKind())
	out.SetNamespace(u.GetNamespace())
	out.SetName(u.GetName())
	out.SetUID(u.GetUID())
	out.SetResourceVersion(u.GetResourceVersion())
	status := map[string]any{}
	if class, ok, _ := unstructured.NestedString(u.Object, "status", "secretProviderClassName"); ok {
		status["secretProviderClassName"] = class
	}
	if _, digest := statusClass(u); digest != "" {
		status[keptDigest] = digest
	}
	if len(status) > 0 {
		out.Object["status"] = status
	}
	if equality.Semantic.DeepEqual(u.Object, out.Object) {
		return u
	}
	return out
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
			if oldKey == key && oldObjects == objects {
				return
			}
			enqueue(key, q)
		},
	}
}
