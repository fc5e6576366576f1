package watcher

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// dependentsOf is where a source hands on the consumers of one kind that take from it:
// the kind's controller, through its queue (an add never blocks), and hand, which tells
// it (before the queue does) that a source changed: a workload kind's triggers in its
// workload state.
type dependentsOf struct {
	name    string // the kind, in logs: "Deployment"
	newList func() client.ObjectList
	items   func(client.ObjectList) []client.Object
	// list, when set, lists the kind's objects of a namespace as the cache holds them
	// (a workload kind's workloadStore); nil: through newList and items.
	list func(ctx context.Context, namespace string) ([]client.Object, error)
	// consumers looks up the dependents of a source (an indexKey) in the cache's own
	// index (addSourceIndex); nil: a List by the field index SourceIndex.
	consumers func(key string) ([]client.Object, error)
	queue     *fairQueue
	hand      func(key types.NamespacedName, changed bool) // nil: nothing to tell
}

// workloadDependents are the workloads of kind as dependents.
func workloadDependents(kind *workload.Kind, consumers func(string) ([]client.Object, error), queue *fairQueue, state *workloadStates) dependentsOf {
	return dependentsOf{name: kind.Kind, newList: kind.NewList, items: kind.Items, consumers: consumers, queue: queue,
		hand: func(key types.NamespacedName, changed bool) {
			state.addTrigger(key, trigger{changed: changed, handoff: true})
		}}
}

// sourceReconciler turns events of one source kind (ConfigMaps or Secrets; metadata
// only: it never holds content) into checks of the workloads that consume them, once
// the source has been quiet. The triggers it adds tell the workload controllers which
// of them saw a real change.
type sourceReconciler struct {
	kind     string        // a stamp.SourceKind's Name
	client   client.Reader // the manager's cache
	debounce *debouncer[types.NamespacedName]
	quiet    time.Duration
	// dependents grows when a kind appears later (the Rollout CRD installed).
	mu         sync.Mutex
	dependents []dependentsOf
	// replay decides which sources of the initial list count as recent writes.
	replay *replayWindow
	scope  *scope.Scope
	// follow is when to look again at a change of a source rolling in waves (0: none;
	// wavesGate.follow); nil: waves never apply. restarted holds the sources queued
	// from the initial list (not a change) until their first follow.
	follow    func(ctx context.Context, kind string, key types.NamespacedName, restarted bool) time.Duration
	restarted sync.Map
}

// events maps source watch events into the debounced queue. The initial list on start
// is skipped: replaying every source as new would send a check to every dependent;
// every workload is checked from its own initial list instead. Only a source written
// since this replica became leader (less a margin) is replayed from the initial list: a
// workload created meanwhile may have missed that write (the webhook stamped it before,
// the watch began after). A resync (same resourceVersion) is no change.
func (r *sourceReconciler) events() handler.Funcs {
	enqueue := func(obj client.Object, changed bool, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		key := client.ObjectKeyFromObject(obj)
		r.debounce.touch(key, changed)
		q.AddAfter(reconcile.Request{NamespacedName: key}, r.quiet)
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if ignored(e.Object) {
				return
			}
			if e.IsInInitialList && !r.replay.recent(ctx, e.Object) {
				if r.follow != nil {
					// Not a change; but a change of it may be rolling in waves
					// (configstamp restarted mid-waves): follow it (Reconcile).
					key := client.ObjectKeyFromObject(e.Object)
					r.restarted.Store(key, true)
					q.Add(reconcile.Request{NamespacedName: key})
				}
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

// Reconcile waits for the source to be quiet, then hands every workload that consumes it
// (found through the source index, not a LIST) to its kind's controller, telling it
// whether the change was seen live. On an error the change stays pending.
func (r *sourceReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	over, changed, wait := r.debounce.ready(req.NamespacedName)
	if !over {
		if wait == 0 && r.follow != nil {
			// Nothing pending: a change rolling in waves is followed to its end.
			_, restarted := r.restarted.LoadAndDelete(req.NamespacedName)
			return reconcile.Result{RequeueAfter: r.follow(ctx, r.kind, req.NamespacedName, restarted)}, nil
		}
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
	if handed && r.follow != nil {
		r.restarted.Delete(req.NamespacedName)
		res.RequeueAfter = r.follow(ctx, r.kind, req.NamespacedName, false)
	}
	return res, err
}

// addDependents makes the workloads of one more kind dependents of the source kind.
func (r *sourceReconciler) addDependents(d dependentsOf) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dependents = append(r.dependents, d)
}

// dependentsIn are d's consumers of the source req, as the cache holds them.
func (r *sourceReconciler) dependentsIn(ctx context.Context, d dependentsOf, req reconcile.Request) ([]client.Object, error) {
	return consumersOf(ctx, r.client, d.consumers, d.newList, d.items, req.Namespace, indexKey(r.kind, req.Namespace, req.Name))
}

func (r *sourceReconciler) fanOut(ctx context.Context, req reconcile.Request, changed bool) (reconcile.Result, error) {
	ns, nsIn, err := namespaceIn(ctx, r.client, r.scope, req.Namespace)
	if err != nil || ns == nil || slices.Contains(r.scope.Excluded, req.Namespace) {
		return reconcile.Result{}, err
	}
	// Outside an opted-in namespace, only workloads opted in by their own label are
	// handed on (their controller checks the scope again).
	r.mu.Lock()
	kinds := slices.Clone(r.dependents)
	r.mu.Unlock()
	for _, d := range kinds {
		items, err := r.dependentsIn(ctx, d, req)
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("list %s dependents of %s %s: %w", d.name, r.kind, req, err)
		}
		if len(items) > 0 {
			logf.FromContext(ctx).V(1).Info("Source quiet; checking its dependents", "source", r.kind, "kind", d.name, "dependents", len(items))
		}
		for _, obj := range items {
			if !nsIn && !r.scope.Labelled(obj.GetLabels()) {
				continue
			}
			key := client.ObjectKeyFromObject(obj)
			if d.hand != nil {
				d.hand(key, changed)
			}
			d.queue.Add(reconcile.Request{NamespacedName: key})
		}
	}
	return reconcile.Result{}, nil
}

// listIn lists the kind's objects of namespace as cache c holds them.
func (d dependentsOf) listIn(ctx context.Context, c client.Reader, namespace string) ([]client.Object, error) {
	if d.list != nil {
		return d.list(ctx, namespace)
	}
	l := d.newList()
	if err := c.List(ctx, l, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	return d.items(l), nil
}
