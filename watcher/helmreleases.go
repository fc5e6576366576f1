package watcher

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/internal/decide"
	"github.com/configstamp/configstamp/internal/flux"
	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/stamp"
)

// Event reasons recorded on HelmReleases.
const (
	// ReasonReconcileRequested: the values it takes changed; configstamp set
	// reconcile.fluxcd.io/requestedAt.
	ReasonReconcileRequested = "ReconcileRequested"
	// ReasonHelmReleaseSuspended: the values it takes changed while it is suspended;
	// nothing requested (requested once it is resumed).
	ReasonHelmReleaseSuspended = "HelmReleaseSuspended"
)

// liveChanges holds the HelmReleases a source handed on after a write the watcher saw
// live (not a replay of the initial list), until a check of each decides: the evidence
// that lets a check whose record was made under another hash key (a rotation) request
// rather than only record (flux.Decide).
type liveChanges struct {
	mu   sync.Mutex
	keys map[types.NamespacedName]struct{}
}

func (l *liveChanges) add(key types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys == nil {
		l.keys = map[types.NamespacedName]struct{}{}
	}
	l.keys[key] = struct{}{}
}

// take reports whether key has a live change, forgetting it.
func (l *liveChanges) take(key types.NamespacedName) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.keys[key]; !ok {
		return false
	}
	delete(l.keys, key)
	l.keys = emptied(l.keys)
	return true
}

// heldBack remembers since when each HelmRelease's check has waited for a source still
// in its burst, so that sources that never go quiet hold it back at most max (as the
// debouncer caps a burst): under constant writes a check still decides.
type heldBack struct {
	mu    sync.Mutex
	since map[types.NamespacedName]time.Time
}

// wait reports whether the check of key should wait for a burst at now: yes until max
// past its first wait.
func (h *heldBack) wait(key types.NamespacedName, now time.Time, max time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since == nil {
		h.since = map[types.NamespacedName]time.Time{}
	}
	first, ok := h.since[key]
	if !ok {
		h.since[key] = now
		return true
	}
	return now.Sub(first) < max
}

// done forgets key's wait: its check went on.
func (h *heldBack) done(key types.NamespacedName) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.since[key]; ok {
		delete(h.since, key)
		h.since = emptied(h.since)
	}
}

// helmReleaseDependents are the HelmReleases as dependents of a source kind.
func helmReleaseDependents(queue *fairQueue, live *liveChanges) dependentsOf {
	return dependentsOf{name: flux.Kind, queue: queue,
		hand: func(key types.NamespacedName, changed bool) {
			if changed {
				live.add(key)
			}
		},
		newList: func() client.ObjectList { return &helmv2.HelmReleaseList{} },
		items: func(l client.ObjectList) []client.Object {
			list, _ := l.(*helmv2.HelmReleaseList)
			if list == nil {
				return nil
			}
			out := make([]client.Object, 0, len(list.Items))
			for i := range list.Items {
				out = append(out, &list.Items[i])
			}
			return out
		}}
}

// setupHelmReleases indexes HelmReleases by the sources their valuesFrom names and starts
// their controller, which the source controllers then feed: the same debounce, index and
// queue as the workloads', but no webhook (helm-controller ignores an empty update): the
// controller writes the request itself.
func (w *watcher) setupHelmReleases(ctx context.Context) error {
	mgr, opts := w.mgr, w.opts
	if err := mgr.GetFieldIndexer().IndexField(ctx, &helmv2.HelmRelease{}, SourceIndex, indexValuesFrom(opts.Sources)); err != nil {
		return fmt.Errorf("index helmreleases by source: %w", err)
	}
	name := strings.ToLower(flux.Kind)
	queue := newFairQueue(name, workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](opts.RetryBase, opts.RetryMax),
		mgr.GetLogger().WithValues("controller", name))
	rec := &helmReleaseReconciler{
		client: mgr.GetClient(), recorder: mgr.GetEventRecorder("configstamp"),
		config:  &configread.Reader{Client: mgr.GetAPIReader(), Cache: opts.Cache, Key: opts.Key, Timeout: opts.ReadTimeout, Seen: w.seen},
		sources: opts.Sources, scope: opts.Scope, waiting: w.waiting, quiet: opts.Debounce, maxWait: opts.DebounceMax, now: time.Now,
	}
	deps := helmReleaseDependents(queue, &rec.live)
	b := ctrl.NewControllerManagedBy(mgr).Named(name).Watches(&helmv2.HelmRelease{}, helmReleaseEvents())
	if !opts.Scope.Namespaced() {
		b = b.WatchesMetadata(&corev1.Namespace{}, namespaceEvents(opts.Scope, mgr.GetClient(), deps))
	}
	err := b.WithOptions(controller.Options{MaxConcurrentReconciles: opts.Concurrency, NewQueue: queue.newQueue}).Complete(rec)
	if err != nil {
		return fmt.Errorf("set up helmrelease controller: %w", err)
	}
	for _, src := range w.sources {
		src.addDependents(deps)
	}
	return nil
}

// indexValuesFrom is the SourceIndex function of HelmReleases: the sources their
// valuesFrom names.
func indexValuesFrom(opts stamp.Options) client.IndexerFunc {
	return func(obj client.Object) []string {
		hr, ok := obj.(*helmv2.HelmRelease)
		if !ok {
			return nil
		}
		srcs := flux.Sources(hr, opts)
		keys := make([]string, 0, len(srcs))
		for _, s := range srcs {
			keys = append(keys, indexKey(s.Kind, hr.Namespace, s.Name))
		}
		return keys
	}
}

// helmReleaseEvents checks a HelmRelease when it appears (the initial list too: a change
// made while configstamp was down is requested at start), and when an update may change
// what is decided: its spec (generation), its labels (the opt-in), the skip annotation
// (taken off, it is recorded at once, not at its next change), or the record. Status
// updates (helm-controller's, at every reconcile) check nothing.
func helmReleaseEvents() handler.Funcs {
	add := func(obj client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			o, n := e.ObjectOld, e.ObjectNew
			if o.GetGeneration() != n.GetGeneration() || !maps.Equal(o.GetLabels(), n.GetLabels()) ||
				o.GetAnnotations()[stamp.ValuesAnnotation] != n.GetAnnotations()[stamp.ValuesAnnotation] ||
				o.GetAnnotations()[stamp.SkipAnnotation] != n.GetAnnotations()[stamp.SkipAnnotation] {
				add(n, q)
			}
		},
	}
}

// helmReleaseReconciler requests a reconcile of a HelmRelease (a new
// reconcile.fluxcd.io/requestedAt) once when the values it takes change, recording
// their keyed digest in the same write (flux.Decide says when).
type helmReleaseReconciler struct {
	client   client.Client // cached reads, direct writes
	recorder recorder.EventRecorder
	config   *configread.Reader
	sources  stamp.Options
	scope    *scope.Scope
	// waiting reports whether a source is still in a burst: the check waits for it
	// (two sources edited a moment apart make one request).
	waiting func(kind string, key types.NamespacedName) bool
	quiet   time.Duration
	// maxWait caps how long it waits for them (--debounce-max).
	maxWait time.Duration
	held    heldBack
	now     func() time.Time
	live    liveChanges
}

// Reconcile checks one HelmRelease.
func (r *helmReleaseReconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, err error) {
	changedLive := r.live.take(req.NamespacedName)
	waited := false
	defer func() {
		if changedLive && (err != nil || res.RequeueAfter > 0) {
			r.live.add(req.NamespacedName) // not decided: its retry still has it
		}
		if !waited {
			r.held.done(req.NamespacedName)
		}
	}()
	hr := &helmv2.HelmRelease{}
	if err := r.client.Get(ctx, req.NamespacedName, hr); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	srcs := flux.Sources(hr, r.sources)
	// The workloads' entry checks: skip annotation, being deleted, scope, nothing taken,
	// over --max-sources (no read of any).
	stop, err := decide.Gate(decide.Entry{Object: hr, Refs: srcs, Options: r.sources}, func() (decide.Scope, error) {
		if in, err := inScope(ctx, r.client, r.scope, hr); err != nil || !in {
			return decide.OutOfScope, err
		}
		return decide.InScope, nil
	})
	if stop == decide.StopTooManySources {
		r.recorder.Eventf(hr, nil, corev1.EventTypeWarning, ReasonTooManySources, "Check",
			"No reconcile requested on values changes: it takes values from %d sources, more than the cap of %d (--max-sources)", len(srcs), r.sources.SourceCap())
	}
	if err != nil || stop != decide.Pass {
		return reconcile.Result{}, err
	}
	for _, s := range srcs {
		if r.waiting(s.Kind, types.NamespacedName{Namespace: hr.Namespace, Name: s.Name}) {
			// Its source reconciler hands it on when the burst is over.
			if waited = r.held.wait(req.NamespacedName, r.now(), r.maxWait); waited {
				return reconcile.Result{RequeueAfter: max(r.quiet, time.Second)}, nil
			}
			break
		}
	}
	st, err := r.config.Stamp(ctx, hr.Namespace, srcs)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("read the values of helmrelease %s: %w", req, err)
	}
	want := flux.RecordOf(st.Key, st.Hash)
	action := flux.Decide(hr, want, len(st.Unmet()) > 0, changedLive)
	log := logf.FromContext(ctx).WithValues("sources", st.SourcesAnnotation(), "action", action.String())
	annotations := map[string]string{stamp.ValuesAnnotation: want}
	switch action {
	case flux.Nothing:
		log.V(1).Info("Checked HelmRelease values")
		return reconcile.Result{}, nil
	case flux.Suspended:
		log.Info("Checked HelmRelease values")
		r.recorder.Eventf(hr, nil, corev1.EventTypeNormal, ReasonHelmReleaseSuspended, "Hold",
			"Values it takes changed (%s); it is suspended: no reconcile requested until it is resumed", st.SourcesAnnotation())
		return reconcile.Result{}, nil
	case flux.Held:
		log.Info("Checked HelmRelease values", "unmet", st.Unmet())
		r.recorder.Eventf(hr, nil, corev1.EventTypeWarning, ReasonConfigMissing, "Hold",
			"Values it takes changed but required config is missing (%s): no reconcile requested", strings.Join(st.Unmet(), "; "))
		return reconcile.Result{}, nil
	case flux.Request:
		annotations[flux.RequestedAtAnnotation] = r.now().UTC().Format(time.RFC3339Nano)
	}
	if err := r.write(ctx, hr, annotations); apierrors.IsConflict(err) {
		// Written since the cache's copy: judged again on a fresh one.
		return reconcile.Result{RequeueAfter: time.Second}, nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	log.Info("Checked HelmRelease values")
	if action == flux.Request {
		r.recorder.Eventf(hr, nil, corev1.EventTypeNormal, ReasonReconcileRequested, "Request",
			"Values it takes changed (%s): requested a reconcile (%s)", st.SourcesAnnotation(), flux.RequestedAtAnnotation)
	}
	return reconcile.Result{}, nil
}

// write sets annotations on hr with a merge patch of its metadata alone, on the
// condition that hr is as read (its resourceVersion): a request and its record are one
// write, made once.
func (r *helmReleaseReconciler) write(ctx context.Context, hr *helmv2.HelmRelease, annotations map[string]string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": hr.ResourceVersion, "annotations": annotations,
	}})
	if err != nil {
		return err
	}
	out := &helmv2.HelmRelease{}
	out.Namespace, out.Name = hr.Namespace, hr.Name
	if err := r.client.Patch(ctx, out, client.RawPatch(types.MergePatchType, body)); err != nil {
		return fmt.Errorf("patch helmrelease %s/%s: %w", hr.Namespace, hr.Name, err)
	}
	return nil
}
