package watcher

import (
	"context"
	"maps"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/internal/decide"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// events checks every workload in the initial list (a change while configstamp was
// down; a workload seen for the first time gets its record), every new one after the
// debounce (unstamped: created while the webhook was unreachable; stamped: its sources
// may have changed before this informer saw it, when their fan-out could not find it,
// as after a relist), every update that may have bypassed the webhook (mayHaveBypassed),
// and every workload that opts in by its own label (it gets its record at once). Updates
// that only move the stamp are the webhook's own work.
func (r *workloadReconciler) events(quiet time.Duration) handler.Funcs {
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.Object == nil || !r.consumes(e.Object) {
				return
			}
			key := client.ObjectKeyFromObject(e.Object)
			switch {
			case e.IsInInitialList:
				r.state.addTrigger(key, trigger{event: true})
				q.Add(reconcile.Request{NamespacedName: key})
			default:
				// A stamped one costs a check of its sources' metadata (the digest cache),
				// and writes nothing while its stamp is current.
				r.state.addTrigger(key, trigger{event: true})
				q.AddAfter(reconcile.Request{NamespacedName: key}, quiet)
			}
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.ObjectOld == nil || e.ObjectNew == nil || !r.consumes(e.ObjectNew) {
				return
			}
			key := client.ObjectKeyFromObject(e.ObjectNew)
			switch {
			case r.state.isOversize(key) && !maps.Equal(e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()):
				// Left alone for size: this update of its annotations may have made room
				// (a change of the template passes mayHaveBypassed anyway).
				r.state.addTrigger(key, trigger{event: true})
				q.AddAfter(reconcile.Request{NamespacedName: key}, quiet)
			case r.kind.Paused(e.ObjectOld) && !r.kind.Paused(e.ObjectNew):
				// Resumed: a change held while it was paused rolls now.
				r.state.addTrigger(key, trigger{event: true})
				q.Add(reconcile.Request{NamespacedName: key})
			case !r.scope.Labelled(e.ObjectOld.GetLabels()) && r.scope.Labelled(e.ObjectNew.GetLabels()):
				// Opted in by its own label: its record, at once.
				r.state.addTrigger(key, trigger{})
				q.Add(reconcile.Request{NamespacedName: key})
			case r.caughtUp(e.ObjectOld, e.ObjectNew):
				// Its controller replaced the last pod on an older template: its record
				// drops the config they ran.
				r.state.addTrigger(key, trigger{})
				q.Add(reconcile.Request{NamespacedName: key})
			case r.mayHaveBypassed(e.ObjectOld, e.ObjectNew):
				r.state.addTrigger(key, trigger{event: true})
				q.AddAfter(reconcile.Request{NamespacedName: key}, quiet)
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.Object != nil {
				r.state.forget(client.ObjectKeyFromObject(e.Object))
			}
		},
	}
}

// consumes reports whether obj has a pod template that consumes a source that counts.
func (r *workloadReconciler) consumes(obj client.Object) bool {
	tmpl := r.kind.Template(obj)
	return tmpl != nil && len(stamp.Consumed(obj.GetAnnotations(), &tmpl.Spec, r.sources)) > 0
}

// mayHaveBypassed reports whether an update (to a workload with a template) may have
// bypassed the webhook: it changed the pod template or the extra sources, or dropped the
// stamp or the record.
func (r *workloadReconciler) mayHaveBypassed(old, obj client.Object) bool {
	oldTmpl, tmpl := r.kind.Template(old), r.kind.Template(obj)
	oldAnn, ann := old.GetAnnotations(), obj.GetAnnotations()
	dropped := oldTmpl != nil && oldTmpl.Annotations[stamp.HashAnnotation] != "" && tmpl.Annotations[stamp.HashAnnotation] == "" ||
		oldAnn[stamp.ObservedAnnotation] != "" && ann[stamp.ObservedAnnotation] == ""
	return dropped || oldTmpl == nil || workload.TemplateFingerprint(oldTmpl) != workload.TemplateFingerprint(tmpl) || oldAnn[stamp.ExtraSourcesAnnotation] != ann[stamp.ExtraSourcesAnnotation]
}

// caughtUp reports whether an update (of its status) shows the last of a workload's pods
// on an older template replaced, while its record still names the config they ran
// (decide.CaughtUp).
func (r *workloadReconciler) caughtUp(old, obj client.Object) bool {
	rec, ok := stamp.ParseObserved(obj.GetAnnotations()[stamp.ObservedAnnotation])
	before, _, _ := r.kind.Behind(old)
	now, _, _ := r.kind.Behind(obj)
	return ok && before > 0 && decide.CaughtUp(rec, now)
}
