package watcher

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/stamp"
)

// configMapReconciler turns ConfigMap events (metadata only: it never holds content) into
// checks of the Deployments that consume them, once the ConfigMap has been quiet.
// dependents feeds the Deployment controller; triggers tells it which of them saw a real
// change.
type configMapReconciler struct {
	client     client.Reader // the manager's cache
	debounce   *debouncer[types.NamespacedName]
	quiet      time.Duration
	dependents chan<- event.GenericEvent
	triggers   *triggers
	// replay decides which ConfigMaps of the initial list count as recent writes.
	replay *replayWindow
	scope  *scope.Scope
}

// events maps ConfigMap watch events into the debounced queue. The initial list on start
// is skipped: replaying every ConfigMap as new would send a check to every dependent;
// every Deployment is checked from its own initial list instead. Only a ConfigMap
// written since this replica became leader (less a margin) is replayed from the initial
// list: a Deployment created meanwhile may have missed that write (the webhook stamped
// it before, the watch began after). A resync (same resourceVersion) is no change.
func (r *configMapReconciler) events() handler.Funcs {
	enqueue := func(obj client.Object, changed bool, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		key := client.ObjectKeyFromObject(obj)
		r.debounce.touch(key, changed)
		q.AddAfter(reconcile.Request{NamespacedName: key}, r.quiet)
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if ignored(e.Object) || (e.IsInInitialList && !r.replay.recent(ctx, e.Object)) {
				return
			}
			// A replayed write is judged by evidence (times), not taken as a change
			// seen live: installing configstamp rolls nothing.
			enqueue(e.Object, !e.IsInInitialList, q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.ObjectOld.GetResourceVersion() == e.ObjectNew.GetResourceVersion() || (ignored(e.ObjectOld) && ignored(e.ObjectNew)) {
				return
			}
			enqueue(e.ObjectNew, true, q)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if ignored(e.Object) {
				return
			}
			enqueue(e.Object, true, q)
		},
	}
}

func ignored(obj client.Object) bool {
	return stamp.IsTrue(obj.GetAnnotations()[stamp.IgnoreAnnotation])
}

// Reconcile waits for the ConfigMap to be quiet, then hands every Deployment that
// consumes it (found through the field index, not a LIST) to the Deployment controller,
// telling it whether the change was seen live. On an error the change stays pending.
func (r *configMapReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	over, changed, wait := r.debounce.ready(req.NamespacedName)
	if !over {
		return reconcile.Result{RequeueAfter: wait}, nil // zero: nothing pending
	}
	handed := false
	defer func() { // also on a panic: a burst must never stay in flight
		if handed {
			r.debounce.done(req.NamespacedName)
		} else {
			r.debounce.restore(req.NamespacedName, changed)
		}
	}()
	res, err := r.fanOut(ctx, req, changed)
	handed = err == nil
	return res, err
}

func (r *configMapReconciler) fanOut(ctx context.Context, req reconcile.Request, changed bool) (reconcile.Result, error) {
	if ok, err := inScope(ctx, r.client, r.scope, req.Namespace); err != nil || !ok {
		return reconcile.Result{}, err
	}
	var deps appsv1.DeploymentList
	if err := r.client.List(ctx, &deps, client.InNamespace(req.Namespace),
		client.MatchingFields{ConfigMapIndex: indexKey(req.Namespace, req.Name)}, client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, fmt.Errorf("list dependents of configmap %s: %w", req, err)
	}
	logf.FromContext(ctx).V(1).Info("ConfigMap quiet; checking its dependents", "dependents", len(deps.Items))
	for i := range deps.Items {
		key := client.ObjectKeyFromObject(&deps.Items[i])
		r.triggers.add(key, trigger{changed: changed, handoff: true})
		ref := &appsv1.Deployment{}
		ref.Namespace, ref.Name = key.Namespace, key.Name
		select {
		case r.dependents <- event.GenericEvent{Object: ref}:
		case <-ctx.Done():
			return reconcile.Result{}, ctx.Err()
		}
	}
	return reconcile.Result{}, nil
}
