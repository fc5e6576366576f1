package watcher

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/internal/decide"
	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// Event reasons recorded on workloads.
const (
	ReasonConfigChanged = "ConfigChanged"
	ReasonStampBypassed = "StampBypassed"
	ReasonConfigMissing = "ConfigMissing"
	ReasonStampTooLarge = "StampTooLarge"
	// ReasonConfigUnreadable: nudges the webhook answered without a stamp, unable to
	// read config; still retried.
	ReasonConfigUnreadable = "ConfigUnreadable"
)

// nudgePatch is the watcher's "empty" update: it only sets the nudge marker, which the
// webhook strips again while it recomputes the stamp. If the stamp is unchanged the API
// server stores nothing; if the webhook is down, the marker lands in the workload's
// metadata, which rolls nothing.
var nudgePatch = client.RawPatch(types.MergePatchType,
	[]byte(`{"metadata":{"annotations":{"`+stamp.NudgeAnnotation+`":"true"}}}`))

// maxBypassRetries is how many times a stamp that bypassed the webhook is retried
// (with backoff, about two and a half minutes in all at the default backoff) before it
// is reported and left alone until the next event.
const maxBypassRetries = 10

// unreadRetry is how often a nudge is retried once maxBypassRetries nudges found the
// webhook unable to read config: slowly, so as not to add to an API server that is
// failing reads, but never given up.
const unreadRetry = 5 * time.Minute

// recordAttempts bounds the record writes of one check. A record is conditional on the
// resourceVersion its decision was made on; one that conflicts (the workload changed
// since) is decided again at once on a live read, which a competing writer is less
// likely to have overtaken than the cache, before the check fails and is retried with
// backoff.
const recordAttempts = 3

// recordConflict is a record write refused because the workload changed since the read
// its decision was made on.
type recordConflict struct{ error }

// workloadReconciler checks one workload's config against the evidence of the config its
// pods run (its stamp, or its record) and, when they differ, either rolls it through the
// webhook (a nudge) or, when its pods already run the current config, records that. One
// runs per kind.
type workloadReconciler struct {
	kind     *workload.Kind
	client   client.Client // cached reads, direct writes
	live     client.Reader // live workload reads
	recorder recorder.EventRecorder
	// config computes stamps from live reads of the sources.
	config   *configread.Reader
	sources  stamp.Options
	scope    *scope.Scope
	evidence *evidence
	triggers *triggers
	// rollStale rolls unstamped workloads that predate configstamp when their config was
	// written after their pods started; off by default: installing rolls nothing.
	rollStale bool
	// minInterval is the least time between two rollouts of one workload by configstamp.
	minInterval time.Duration
	// pending reports a source (kind, key) still waiting to be quiet: its dependents are
	// checked when it is, not before (a burst ends in one rollout).
	pending func(kind string, key types.NamespacedName) bool

	mu       sync.Mutex
	lastRoll map[types.NamespacedName]time.Time
	bypasses map[types.NamespacedName]int
	// unreads counts the nudges of a workload the webhook could not stamp for want of
	// config it could read.
	unreads map[types.NamespacedName]int
	// oversize holds workloads left alone because configstamp's annotations would take
	// theirs past the API server's size limit: an update of their annotations is checked
	// (it may have made room). The value tells the checks apart: a check clears the mark
	// only if it did not set it again.
	oversize    map[types.NamespacedName]uint64
	oversizeSeq uint64
}

// events checks every workload in the initial list (a change while configstamp was
// down; a workload seen for the first time gets its record), every new unstamped one
// after the debounce (created while the webhook was unreachable), every update that
// changed the pod template or the extra sources or dropped the stamp or the record (it
// may have bypassed the webhook), and every workload that opts in by its own label (it
// gets its record at once).
// Updates that only move the stamp are the webhook's own work; a new stamped workload
// is covered by the source events.
func (r *workloadReconciler) events(quiet time.Duration) handler.Funcs {
	consumes := func(obj client.Object) bool {
		tmpl := r.kind.Template(obj)
		return tmpl != nil && len(stamp.Consumed(obj.GetAnnotations(), &tmpl.Spec, r.sources)) > 0
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.Object == nil || !consumes(e.Object) {
				return
			}
			key := client.ObjectKeyFromObject(e.Object)
			switch {
			case e.IsInInitialList:
				r.triggers.add(key, trigger{event: true})
				q.Add(reconcile.Request{NamespacedName: key})
			case r.kind.Template(e.Object).Annotations[stamp.HashAnnotation] == "":
				r.triggers.add(key, trigger{event: true})
				q.AddAfter(reconcile.Request{NamespacedName: key}, quiet)
			}
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.ObjectOld == nil || e.ObjectNew == nil || !consumes(e.ObjectNew) {
				return
			}
			key := client.ObjectKeyFromObject(e.ObjectNew)
			if r.isOversize(key) && !maps.Equal(e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()) {
				// Left alone for size: this update of its annotations may have made room
				// (a change of the template passes the filter below anyway).
				r.triggers.add(key, trigger{event: true})
				q.AddAfter(reconcile.Request{NamespacedName: key}, quiet)
				return
			}
			if !r.scope.Labelled(e.ObjectOld.GetLabels()) && r.scope.Labelled(e.ObjectNew.GetLabels()) {
				// Opted in by its own label: its record, at once.
				r.triggers.add(key, trigger{})
				q.Add(reconcile.Request{NamespacedName: key})
				return
			}
			oldTmpl, tmpl := r.kind.Template(e.ObjectOld), r.kind.Template(e.ObjectNew)
			oldAnn, ann := e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()
			dropped := oldTmpl != nil && oldTmpl.Annotations[stamp.HashAnnotation] != "" && tmpl.Annotations[stamp.HashAnnotation] == "" ||
				oldAnn[stamp.ObservedAnnotation] != "" && ann[stamp.ObservedAnnotation] == ""
			if !dropped && oldTmpl != nil && stamp.SameTemplate(oldTmpl, tmpl) && oldAnn[stamp.ExtraSourcesAnnotation] == ann[stamp.ExtraSourcesAnnotation] {
				return
			}
			r.triggers.add(key, trigger{event: true})
			q.AddAfter(reconcile.Request{NamespacedName: key}, quiet)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.Object != nil {
				r.forget(client.ObjectKeyFromObject(e.Object))
			}
		},
	}
}

// Reconcile checks the workload; the trigger that queued it is kept for a retry.
func (r *workloadReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	tr := r.triggers.take(req.NamespacedName)
	if tr.event {
		r.resetBypasses(req.NamespacedName)
	}
	r.mu.Lock()
	mark := r.oversize[req.NamespacedName]
	r.mu.Unlock()
	res, err := r.check(ctx, req.NamespacedName, tr)
	if err == nil {
		// Checked: it fits now, unless this check marked it again. An update that came
		// in meanwhile still saw the mark (and queued another check).
		r.mu.Lock()
		if r.oversize[req.NamespacedName] == mark {
			delete(r.oversize, req.NamespacedName)
		}
		r.mu.Unlock()
	}
	if err != nil || res.RequeueAfter > 0 {
		r.triggers.add(req.NamespacedName, trigger{changed: tr.changed, handoff: tr.handoff}) // a retry, not an event
	} else {
		// Nothing owed: the next nudge that does not roll starts its count afresh.
		r.resetBypasses(req.NamespacedName)
	}
	return res, err
}

// check judges the workload as the cache shows it; a record that conflicts is judged
// again on a live read, up to recordAttempts records in all.
func (r *workloadReconciler) check(ctx context.Context, key types.NamespacedName, tr trigger) (reconcile.Result, error) {
	obj := r.kind.New()
	if err := r.client.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(key)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	res, err := r.judge(ctx, obj, tr, false)
	for attempt := 1; ; attempt++ {
		var conflict recordConflict
		if !errors.As(err, &conflict) {
			return res, err
		}
		if attempt == recordAttempts {
			checks.WithLabelValues("error").Inc()
			return res, conflict.error
		}
		logf.FromContext(ctx).Info("Record conflicted: deciding again on a live read", "attempt", attempt, "error", conflict.error)
		obj = r.kind.New()
		if err := r.live.Get(ctx, key, obj); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		res, err = r.judge(ctx, obj, tr, true)
	}
}

// judge decides for one workload. live tells that obj was read from the API server
// rather than the cache: a decision on an uncertain basis is only ever made on a live
// read, since the cache may not show configstamp's own latest write (a record) yet.
func (r *workloadReconciler) judge(ctx context.Context, obj client.Object, tr trigger, live bool) (reconcile.Result, error) {
	log := logf.FromContext(ctx)
	key := client.ObjectKeyFromObject(obj)
	tmpl := r.kind.Template(obj)
	if tmpl == nil || obj.GetDeletionTimestamp() != nil || stamp.IsTrue(obj.GetAnnotations()[stamp.SkipAnnotation]) {
		return reconcile.Result{}, nil
	}
	if ok, err := inScope(ctx, r.client, r.scope, obj); err != nil || !ok {
		return reconcile.Result{}, err
	}
	refs := stamp.Consumed(obj.GetAnnotations(), &tmpl.Spec, r.sources)
	if len(refs) == 0 {
		return reconcile.Result{}, nil
	}
	if !tr.changed && !tr.handoff && r.pending != nil {
		// A ConfigMap it consumes is still changing: its debounce checks this workload
		// when it is quiet (a burst ends in one rollout). This holds for a workload
		// without a basis too: recording now would take in the change its pods have not
		// seen; the burst's end rolls it instead.
		for _, src := range refs {
			if r.pending(src.Kind, types.NamespacedName{Namespace: obj.GetNamespace(), Name: src.Name}) {
				log.V(1).Info("Check left to the source's debounce", "source", src.ID())
				return reconcile.Result{}, nil
			}
		}
	}

	// The basis: what the pods are judged to run. A record made for this very template
	// is certain (the webhook writes one with every stamp). Without one, the template's
	// stamp may have been made for another template (an update that bypassed the
	// webhook), or there is none (a workload that predates configstamp).
	stored := tmpl.Annotations[stamp.HashAnnotation]
	storedSources := tmpl.Annotations[stamp.SourcesAnnotation]
	basis := stored
	rec, certain := stamp.ObservedFor(obj.GetAnnotations(), tmpl)
	certain = certain && rec.Certain(refs)
	if certain {
		basis = rec.Hash
	} else if !live {
		fresh := r.kind.New()
		if err := r.live.Get(ctx, key, fresh); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		if fresh.GetResourceVersion() != obj.GetResourceVersion() {
			return r.judge(ctx, fresh, tr, true)
		}
	}
	want, err := r.expected(ctx, obj, refs)
	if err != nil {
		checks.WithLabelValues("error").Inc()
		return reconcile.Result{}, err
	}
	d, err := decide.Decide(decide.Input{Template: tmpl, Refs: refs, Basis: basis, Certain: certain, Record: rec.Hash,
		Want: want, ChangedLive: tr.changed, RollStale: r.rollStale}, r.evidence.forWorkload(ctx, r.kind, obj, refs))
	if err != nil {
		checks.WithLabelValues("error").Inc()
		return reconcile.Result{}, err
	}
	switch d.Action {
	case decide.Current:
		r.resetBypasses(key)
		if !certain && !r.triggers.changedSince(key) {
			// A stamp without a record (made by a version that wrote none, or the
			// record was dropped): record it, so later decisions are certain.
			return reconcile.Result{}, r.record(ctx, obj, tmpl, want, stamp.HasSecrets(refs))
		}
		log.V(1).Info("Config current", "hash", basis)
		checks.WithLabelValues("current").Inc()
		return reconcile.Result{}, nil
	case decide.Held:
		// Rolling now would start pods that cannot start: wait for the config to return
		// (unchanged: nothing rolls; changed: one rollout).
		checks.WithLabelValues("held").Inc()
		r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonConfigMissing, "Hold",
			"Not rolling: %s; new pods could not start. Waiting for it to return", strings.Join(d.Unmet, "; "))
		log.Info("Held a rollout: required config is missing", "missing", d.Unmet, "basis", basis)
		return reconcile.Result{}, nil
	}
	log.V(1).Info("Config differs from the basis", "basis", basis, "certain", certain, "want", want.Hash, "changedLive", tr.changed,
		"liveRead", live, "decision", string(d.Action), "why", string(d.Why))
	switch d.Action {
	case decide.Record:
		if r.triggers.changedSince(key) {
			// A live change arrived while this check ran (its ConfigMap's burst ended
			// meanwhile): the check it queued rolls; recording now would hide it.
			return reconcile.Result{}, nil
		}
		if behind, err := r.evidence.cacheBehind(ctx, obj.GetNamespace(), refs); err != nil || behind {
			// A write the content read saw has not reached the watch yet: its event
			// will start a burst; recording now would take it in unseen.
			return reconcile.Result{RequeueAfter: time.Second}, err
		}
		return reconcile.Result{}, r.record(ctx, obj, tmpl, want, stamp.HasSecrets(refs))
	case decide.TooLarge:
		// The webhook would leave it unstamped (the API server would refuse the
		// template with the stamp in it): a nudge would change nothing.
		return reconcile.Result{}, r.tooLarge(ctx, obj, "pod template", want.Hash)
	case decide.Roll:
	default:
		checks.WithLabelValues("error").Inc()
		return reconcile.Result{}, fmt.Errorf("%s %s: no decision (%s)", r.kind, key, d.Action)
	}
	if wait := r.untilNextRoll(key); wait > 0 {
		log.V(1).Info("Rollout deferred: minimum interval between rollouts", "wait", wait.String())
		checks.WithLabelValues("deferred").Inc()
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	return r.nudge(ctx, obj, want, basis, storedSources, d.Restart)
}

// record writes the config the pods run into the workload's metadata (no rollout),
// conditional on the resourceVersion the decision was made on (a conflict is a
// recordConflict, for check to decide again). The marker tells the webhook the record
// is configstamp's own (it keeps anyone else's updates from changing it) and is
// stripped by it.
func (r *workloadReconciler) record(ctx context.Context, obj client.Object, tmpl *corev1.PodTemplateSpec, want stamp.Stamp, hasSecrets bool) error {
	if want.Hash == "" { // every source ignored: nothing to record
		return nil
	}
	rec := stamp.Observed{Hash: want.Hash, Template: stamp.TemplateFingerprint(tmpl), Secrets: hasSecrets}
	if !stamp.AnnotationsFit(obj.GetAnnotations(), map[string]string{stamp.ObservedAnnotation: rec.String(), stamp.NudgeAnnotation: ""}) {
		// The API server would refuse it: no record (decisions stay on the stamp and the
		// times of pods and config), and no retry until the workload changes.
		return r.tooLarge(ctx, obj, "metadata", want.Hash)
	}
	stored := tmpl.Annotations[stamp.HashAnnotation]
	patch := fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"annotations":{%q:%q,%q:%q}}}`, obj.GetResourceVersion(),
		stamp.ObservedAnnotation, rec.String(), stamp.NudgeAnnotation, stamp.NudgeRecord)
	if err := r.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		err = fmt.Errorf("record observed config of %s %s/%s: %w", r.kind, obj.GetNamespace(), obj.GetName(), err)
		if apierrors.IsConflict(err) {
			return recordConflict{err} // counted by check, which decides again
		}
		checks.WithLabelValues("error").Inc()
		return err
	}
	checks.WithLabelValues("recorded").Inc()
	logf.FromContext(ctx).Info("Recorded the config the pods run", "hash", want.Hash, "stamp", stored)
	return nil
}

// nudge rolls the workload through the webhook and verifies the stamp it got.
func (r *workloadReconciler) nudge(ctx context.Context, obj client.Object, want stamp.Stamp, basis, before string, restart bool) (reconcile.Result, error) {
	key := client.ObjectKeyFromObject(obj)
	restartedBefore, storedBefore := "", "" // obj is updated in place by the patch
	if tmpl := r.kind.Template(obj); tmpl != nil {
		restartedBefore = tmpl.Annotations[stamp.RestartedAnnotation]
		storedBefore = tmpl.Annotations[stamp.HashAnnotation]
	}
	pctx, warned := collectWarnings(ctx)
	if err := r.client.Patch(pctx, obj, nudgePatch); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		checks.WithLabelValues("error").Inc()
		return reconcile.Result{}, fmt.Errorf("nudge %s %s: %w", r.kind, key, err)
	}
	nudges.Inc()
	tmpl := r.kind.Template(obj)
	if tmpl == nil { // it dropped its template meanwhile (a Rollout given a workloadRef)
		return reconcile.Result{}, nil
	}
	got := tmpl.Annotations[stamp.HashAnnotation]
	// A new stamp or restart time is a rollout, whatever config the webhook read.
	rolledNow := got != storedBefore || tmpl.Annotations[stamp.RestartedAnnotation] != restartedBefore
	if _, marked := obj.GetAnnotations()[stamp.NudgeAnnotation]; marked {
		// The webhook strips the marker it reads: it was not called at all (even if
		// the template happens to carry the wanted stamp already).
		return reconcile.Result{}, r.bypassed(ctx, obj, got, want.Hash, "the configstamp webhook was not called (failurePolicy Ignore)")
	}
	// The webhook was called (it stripped the marker). Did it roll, and if not, why?
	unread := func() (reconcile.Result, error) {
		if warned.has(stamp.WarningUnreadConfig) {
			return r.unread(ctx, obj, got)
		}
		// No rollout and no word why: something else took configstamp's marker off
		// (another mutating webhook), or the webhook does not take the watcher's
		// nudges for its own (its --self is another identity).
		return reconcile.Result{}, r.bypassed(ctx, obj, got, want.Hash,
			"the nudge's marker was removed but the configstamp webhook did not stamp it (another mutating webhook may remove configstamp's annotations, or the webhook does not know the watcher's identity)")
	}
	if got != want.Hash {
		if rolledNow {
			// The webhook stamped (or restarted onto) the config it read, which moved on
			// since this check read it: a rollout all the same. A later change brings its
			// own event.
			r.reportRolled(ctx, obj, tmpl, stamp.Rollout{StoredHash: storedBefore, StoredSources: before, Hash: got,
				Sources: tmpl.Annotations[stamp.SourcesAnnotation], Ran: basis, Restart: got == storedBefore})
			return reconcile.Result{}, nil
		}
		// The webhook was called (it stripped the marker) and kept what is stored. The
		// config may have moved on since we read it: compare with a fresh read.
		refs := stamp.Consumed(obj.GetAnnotations(), &tmpl.Spec, r.sources)
		again, err := r.expected(ctx, obj, refs)
		if err == nil && (again.Hash == got || len(again.Unmet()) > 0) {
			// Config as the stamp names it, or missing config: nothing to roll now.
			checks.WithLabelValues("current").Inc()
			return reconcile.Result{}, nil
		}
		if err == nil && r.changedBack(ctx, obj, tmpl, refs, again.Hash) {
			return reconcile.Result{}, nil
		}
		if err == nil && !stamp.AnnotationsFit(tmpl.Annotations, stamp.TemplateAnnotations(again.Hash, again.SourcesAnnotation(), "")) {
			// The config grew between our read and the webhook's: its stamp no longer
			// fits, so the webhook left it.
			return reconcile.Result{}, r.tooLarge(ctx, obj, "pod template", again.Hash)
		}
		return unread()
	}
	if restart && tmpl.Annotations[stamp.RestartedAnnotation] == restartedBefore {
		// The template already carried the wanted stamp: only the restart time rolls the
		// pods, and the webhook did not set it: the config changed back to what the pods
		// run, or it could not read config.
		refs := stamp.Consumed(obj.GetAnnotations(), &tmpl.Spec, r.sources)
		again, err := r.expected(ctx, obj, refs)
		if err == nil && len(again.Unmet()) > 0 {
			// Required config went missing meanwhile: the next check holds it.
			checks.WithLabelValues("current").Inc()
			return reconcile.Result{}, nil
		}
		if err == nil && r.changedBack(ctx, obj, tmpl, refs, again.Hash) {
			return reconcile.Result{}, nil
		}
		return unread()
	}
	if !rolledNow {
		// Nothing changed and nothing was to (a stamp dropped that was never there).
		// A cache that showed an older template than the live one is not caught here:
		// its nudge is reported as a rollout.
		r.resetBypasses(key)
		checks.WithLabelValues("current").Inc()
		return reconcile.Result{}, nil
	}
	// The basis is the certain record's hash when there is one, else the stored stamp's:
	// as Ran, it counts only where it differs from the stamp, as a record's does.
	r.reportRolled(ctx, obj, tmpl, stamp.Rollout{StoredHash: storedBefore, StoredSources: before,
		Hash: got, Sources: tmpl.Annotations[stamp.SourcesAnnotation], Ran: basis, Restart: restart})
	return reconcile.Result{}, nil
}

// unread handles a nudge the webhook answered without rolling for no reason the watcher
// can see: it was called (it stripped the marker) and kept what is stored because it
// could not read config (a read error or timeout; its warning on the update says so).
// That is no bypass, and the change stays owed: retried with backoff, then, after
// maxBypassRetries attempts, every unreadRetry (reported once with a ConfigUnreadable
// Event), until a nudge rolls it or an event starts over.
func (r *workloadReconciler) unread(ctx context.Context, obj client.Object, got string) (reconcile.Result, error) {
	key := client.ObjectKeyFromObject(obj)
	r.mu.Lock()
	if r.unreads == nil {
		r.unreads = map[types.NamespacedName]int{}
	}
	r.unreads[key]++
	n := r.unreads[key]
	r.mu.Unlock()
	checks.WithLabelValues("unread").Inc()
	log := logf.FromContext(ctx)
	if n <= maxBypassRetries {
		log.Info("The webhook kept the stored stamp (it could not read config); retrying", "storedHash", got, "attempt", n)
		return reconcile.Result{}, fmt.Errorf("%s %s: the webhook kept the stored stamp %q: it could not read config; retrying", r.kind, key, stamp.ShortHash(got))
	}
	if n == maxBypassRetries+1 {
		r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonConfigUnreadable, "Nudge",
			"Not rolled after %d nudges: the configstamp webhook could not read this %s's config (its log says why: \"could not read config\"); retrying about every %s",
			n, r.kind, unreadRetry)
	}
	// Spread out: many workloads may be waiting on one failing API server.
	after := unreadRetry + rand.N(unreadRetry/5)
	log.Info("The webhook still cannot read config; retrying later", "storedHash", got, "attempt", n, "after", after.String())
	return reconcile.Result{RequeueAfter: after}, nil
}

// reportRolled reports a rollout a nudge caused. Its ConfigChanged Event says what the
// change cause the webhook wrote says: that cause, read back from the patch's answer
// (it is this rollout's: the webhook writes or removes its own cause on every rollout
// it causes), or, when it has none (no room for one), the same text made from what
// the watcher knew before the nudge (ro), which the cache may have shown late.
func (r *workloadReconciler) reportRolled(ctx context.Context, obj client.Object, tmpl *corev1.PodTemplateSpec, ro stamp.Rollout) {
	key := client.ObjectKeyFromObject(obj)
	r.resetBypasses(key)
	r.rolled(key)
	checks.WithLabelValues("nudged").Inc()
	reason, ok := stamp.OwnChangeReason(obj.GetAnnotations()[stamp.ChangeCauseAnnotation])
	if !ok {
		reason = stamp.ChangeReason(ro)
	}
	r.recorder.Eventf(obj, nil, corev1.EventTypeNormal, ReasonConfigChanged, "Nudge", "Rolled: %s", reason)
	logf.FromContext(ctx).Info("Nudged "+r.kind.Kind+" after a config change", "oldHash", ro.Ran, "newHash", tmpl.Annotations[stamp.HashAnnotation],
		"reason", reason)
}

// changedBack reports whether a certain record valid for tmpl says obj's pods run the
// config of hash (read after the nudge): the config changed back to it, and the webhook
// kept the nudged workload as it was stored (a stale stamp included). Nothing rolled,
// and nothing needs to.
func (r *workloadReconciler) changedBack(ctx context.Context, obj client.Object, tmpl *corev1.PodTemplateSpec, refs []stamp.Source, hash string) bool {
	rec, ok := stamp.ObservedFor(obj.GetAnnotations(), tmpl)
	if !ok || !rec.Certain(refs) || rec.Hash != hash {
		return false
	}
	r.resetBypasses(client.ObjectKeyFromObject(obj))
	checks.WithLabelValues("current").Inc()
	logf.FromContext(ctx).V(1).Info("Config changed back to what the pods run before the nudge: nothing rolled", "hash", hash,
		"stamp", tmpl.Annotations[stamp.HashAnnotation])
	return true
}

// countBypass counts one more nudge of key that did not roll, and returns the count.
func (r *workloadReconciler) countBypass(key types.NamespacedName) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bypasses == nil {
		r.bypasses = map[types.NamespacedName]int{}
	}
	r.bypasses[key]++
	return r.bypasses[key]
}

// bypassed reports a nudge the webhook did not stamp, and retries it a bounded number of
// times; then it is left alone until the next event.
func (r *workloadReconciler) bypassed(ctx context.Context, obj client.Object, got, want, why string) error {
	key := client.ObjectKeyFromObject(obj)
	n := r.countBypass(key)
	bypasses.Inc()
	if n > maxBypassRetries {
		checks.WithLabelValues("bypass_abandoned").Inc()
		r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonStampBypassed, "Verify",
			"Stored config hash %q still differs from the expected %q after %d nudges: %s; left alone until its next change",
			stamp.ShortHash(got), stamp.ShortHash(want), n, why)
		logf.FromContext(ctx).Info("Stopped retrying a stamp that bypassed the webhook", "storedHash", got, "expectedHash", want, "attempts", n)
		r.resetBypasses(key)
		return nil
	}
	checks.WithLabelValues("bypassed").Inc()
	r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonStampBypassed, "Verify",
		"Stored config hash %q differs from the expected %q after a nudge: %s; retrying",
		stamp.ShortHash(got), stamp.ShortHash(want), why)
	logf.FromContext(ctx).Info("Detected a stamp that bypassed the webhook; retrying", "storedHash", got, "expectedHash", want, "attempt", n)
	return fmt.Errorf("%s %s: stamp %q, want %q: webhook bypassed", r.kind, key, stamp.ShortHash(got), stamp.ShortHash(want))
}

// tooLarge reports a workload whose stamp (part "pod template") or record (part
// "metadata") would take its annotations past the API server's size limit, and leaves it
// alone until it changes.
func (r *workloadReconciler) tooLarge(ctx context.Context, obj client.Object, part, want string) error {
	key := client.ObjectKeyFromObject(obj)
	r.mu.Lock()
	if r.oversize == nil {
		r.oversize = map[types.NamespacedName]uint64{}
	}
	r.oversizeSeq++
	r.oversize[key] = r.oversizeSeq
	r.mu.Unlock()
	checks.WithLabelValues("too_large").Inc()
	what := "rolled on config changes"
	if part == "metadata" {
		what = "given its record of the config its pods run"
	}
	r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonStampTooLarge, "Check",
		"Not %s: configstamp's annotations would take the %s's %s annotations past the API server's limit of %d bytes; make them smaller",
		what, r.kind, part, stamp.AnnotationSizeLimit)
	logf.FromContext(ctx).Info("Left alone: configstamp's annotations would exceed the annotation size limit", "part", part,
		"wantHash", want, "limit", stamp.AnnotationSizeLimit)
	return nil
}

func (r *workloadReconciler) isOversize(key types.NamespacedName) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.oversize[key]
	return ok
}

func (r *workloadReconciler) resetBypasses(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.bypasses, key)
	delete(r.unreads, key)
}

// untilNextRoll is how long until the workload may be rolled again (zero: now).
func (r *workloadReconciler) untilNextRoll(key types.NamespacedName) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.lastRoll[key]
	if !ok || r.minInterval <= 0 {
		return 0
	}
	return max(0, r.minInterval-time.Since(last))
}

// rolled remembers a rollout; entries older than the interval are dropped as it goes.
func (r *workloadReconciler) rolled(key types.NamespacedName) {
	if r.minInterval <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lastRoll == nil {
		r.lastRoll = map[types.NamespacedName]time.Time{}
	}
	now := time.Now()
	if len(r.lastRoll) > 256 {
		for k, t := range r.lastRoll {
			if now.Sub(t) >= r.minInterval {
				delete(r.lastRoll, k)
			}
		}
	}
	r.lastRoll[key] = now
}

func (r *workloadReconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.lastRoll, key)
	delete(r.bypasses, key)
	delete(r.unreads, key)
	delete(r.oversize, key)
}

func (r *workloadReconciler) expected(ctx context.Context, obj client.Object, refs []stamp.Source) (stamp.Stamp, error) {
	st, err := r.config.Stamp(ctx, obj.GetNamespace(), refs)
	if err != nil {
		return stamp.Stamp{}, fmt.Errorf("compute stamp of %s %s/%s: %w", r.kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return st, nil
}
