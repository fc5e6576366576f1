package watcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/internal/decide"
	"github.com/configstamp/configstamp/internal/notify"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// recordAttempts bounds the record writes of one check: a record that conflicts (the
// workload changed since the read it was decided on) is decided again at once on a live
// read, before the check fails and is retried with backoff.
const recordAttempts = 3

// recordConflict is a record write refused because the workload changed since the read
// its decision was made on.
type recordConflict struct{ error }

// Reconcile checks the workload; the trigger that queued it is kept for a retry.
func (r *workloadReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if r.checks != nil {
		r.checks.Add(1)
	}
	tr := r.state.takeTrigger(req.NamespacedName)
	if tr.event {
		r.state.resetBypasses(req.NamespacedName)
	}
	mark := r.state.oversizeMark(req.NamespacedName)
	rc := r.beginRecheck(ctx, req.NamespacedName, tr)
	wasAbandoned := r.state.beginCheck(req.NamespacedName, tr.recheckOnly())
	res, err := r.check(ctx, req.NamespacedName, tr)
	r.state.endCheck(req.NamespacedName, err == nil && res.RequeueAfter == 0, wasAbandoned)
	if err == nil {
		// Checked: it fits now, unless this check marked it again.
		r.state.clearOversize(req.NamespacedName, mark)
	}
	if err != nil || res.RequeueAfter > 0 {
		r.state.addTrigger(req.NamespacedName, trigger{changed: tr.changed, handoff: tr.handoff, recheck: tr.recheck}) // a retry, not an event
	} else {
		// Nothing owed: the next nudge that does not roll starts its count afresh.
		r.state.resetBypasses(req.NamespacedName)
		r.finishRecheck(ctx, rc)
	}
	return res, err
}

// check judges the workload as the cache shows it; a record that conflicts is judged
// again on a live read, up to recordAttempts records in all.
func (r *workloadReconciler) check(ctx context.Context, key types.NamespacedName, tr trigger) (reconcile.Result, error) {
	obj, err := r.store().get(ctx, key, true)
	if err != nil {
		if apierrors.IsNotFound(err) {
			r.state.forget(key)
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
		if obj, err = r.liveGet(ctx, key); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		res, err = r.judge(ctx, obj, tr, true)
	}
}

// judged is a workload as its check judges it: its template, the sources it consumes,
// what its pods are judged to run (the basis) and the config it should run.
type judged struct {
	obj           client.Object
	key           types.NamespacedName
	tmpl          *corev1.PodTemplateSpec
	refs          []stamp.Source
	basis         string
	certain       bool
	storedSources string
	want          stamp.Stamp
	tr            trigger
	live          bool
	// caughtUp: its record names config older pods still run, and its controller shows
	// none left (decide.CaughtUp).
	caughtUp bool
}

// judge decides for one workload. live tells that obj was read from the API server
// rather than the cache: a decision on an uncertain basis is only ever made on a live
// read, since the cache may not show configstamp's own latest write (a record) yet.
func (r *workloadReconciler) judge(ctx context.Context, obj client.Object, tr trigger, live bool) (reconcile.Result, error) {
	tmpl, refs, err := r.admitted(ctx, obj)
	if err != nil || tmpl == nil {
		return reconcile.Result{}, err
	}
	if !tr.changed && !tr.handoff && r.leftToDebounce(ctx, obj, refs) {
		return reconcile.Result{}, nil
	}
	j := judged{obj: obj, key: client.ObjectKeyFromObject(obj), tmpl: tmpl, refs: refs,
		storedSources: tmpl.Annotations[stamp.SourcesAnnotation], tr: tr, live: live}
	rec, recValid := stamp.ObservedWith(obj.GetAnnotations(), workload.TemplateFingerprint(tmpl))
	j.basis, j.certain = decide.Basis(tmpl.Annotations[stamp.HashAnnotation], rec, recValid, refs)
	behind, _, _ := r.kind.Behind(obj)
	j.caughtUp = recValid && decide.CaughtUp(rec, behind)
	if !j.certain && !live {
		fresh, err := r.liveGet(ctx, j.key)
		if err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		if fresh.GetResourceVersion() != obj.GetResourceVersion() {
			return r.judge(ctx, fresh, tr, true)
		}
	}
	if j.want, err = r.expected(ctx, obj, refs); err != nil {
		if errors.Is(err, configread.ErrTimeout) {
			return r.readTimedOut(ctx, obj, len(refs), err)
		}
		checks.WithLabelValues("error").Inc()
		return reconcile.Result{}, err
	}
	if recValid && rec.Key != "" && rec.Key != j.want.Key {
		if res, wait, err := r.underFreshKey(ctx, &j, rec.Key); wait || err != nil {
			return res, err
		}
	}
	d, err := decide.Decide(decide.Input{Template: tmpl, Refs: refs, Basis: j.basis, Certain: j.certain, Record: rec.Hash,
		Want: j.want, ChangedLive: tr.changed, RollStale: r.rollStale, NoPods: r.kind.NoPods()}, r.evidence.forWorkload(ctx, r.kind, obj, refs))
	if err != nil {
		checks.WithLabelValues("error").Inc()
		return reconcile.Result{}, err
	}
	return r.act(ctx, j, d)
}

// underFreshKey judges a workload whose record was made under another key (theirs) than
// j.want under a key read a moment ago: the watcher's own may be the stale one (then
// j.want is computed again). A record under a key other than the fresh one was made
// before a rotation, or by a replica that had not read it yet: the check goes on, and its
// nudge, naming the fresh key, rolls it once. wait: the key could not be read again now
// (rate-limited, or failing); the check is retried, never rolled on a mismatch alone.
func (r *workloadReconciler) underFreshKey(ctx context.Context, j *judged, theirs string) (res reconcile.Result, wait bool, err error) {
	if r.freshKey == nil {
		return reconcile.Result{}, false, nil
	}
	// The record's key was in use when it was written: by a second after the workload's
	// last write time (one-second resolution; never later than now, whatever the clocks).
	// A key read started before may predate it.
	since := workload.LastWrite(j.obj).Add(time.Second)
	if now := time.Now(); since.After(now) {
		since = now
	}
	if !r.freshKey(ctx, since) {
		res, err = r.keyMismatch(ctx, j.obj, fmt.Sprintf("its record was made under hash key %s, this watcher holds %s and could not read the key again yet", theirs, j.want.Key))
		return res, true, err
	}
	if r.config.Key != nil && stamp.KeyFingerprint(r.config.Key()) != j.want.Key {
		logf.FromContext(ctx).Info("The hash key changed since the check read config: reading it again", "recordKey", theirs, "key", j.want.Key)
		if j.want, err = r.expected(ctx, j.obj, j.refs); err != nil {
			checks.WithLabelValues("error").Inc()
			return reconcile.Result{}, true, err
		}
	}
	return reconcile.Result{}, false, nil
}

// admitted returns the template and the consumed sources of a workload the watcher
// checks; a nil template when it does not (none, or an entry check stops it: decide.Gate).
func (r *workloadReconciler) admitted(ctx context.Context, obj client.Object) (*corev1.PodTemplateSpec, []stamp.Source, error) {
	tmpl := r.kind.Template(obj)
	if tmpl == nil {
		return nil, nil, nil
	}
	refs := stamp.Consumed(obj.GetAnnotations(), &tmpl.Spec, r.sources)
	stop, err := decide.Gate(decide.Entry{Object: obj, Refs: refs, Options: r.sources}, func() (decide.Scope, error) {
		if ok, err := inScope(ctx, r.client, r.scope, obj); err != nil || !ok {
			return decide.OutOfScope, err
		}
		return decide.InScope, nil
	})
	if stop == decide.StopTooManySources {
		r.tooManySources(ctx, obj, refs)
	}
	if err != nil || stop != decide.Pass {
		return nil, nil, err
	}
	return tmpl, refs, nil
}

// leftToDebounce reports whether a source obj consumes is still changing: its debounce
// checks obj when it is quiet (a burst ends in one rollout). This holds for a workload
// without a basis too: recording now would take in a change its pods have not seen.
func (r *workloadReconciler) leftToDebounce(ctx context.Context, obj client.Object, refs []stamp.Source) bool {
	if r.pending == nil {
		return false
	}
	for _, src := range refs {
		if r.pending(src.Kind, types.NamespacedName{Namespace: obj.GetNamespace(), Name: src.Name}) {
			logf.FromContext(ctx).V(1).Info("Check left to the source's debounce", "source", src.ID())
			return true
		}
	}
	return false
}

// act carries out the decision d made for j.
func (r *workloadReconciler) act(ctx context.Context, j judged, d decide.Decision) (reconcile.Result, error) {
	switch d.Action {
	case decide.Current:
		if err := r.current(ctx, j); err != nil {
			return reconcile.Result{}, err
		}
		r.markCurrent(ctx, j)
		return reconcile.Result{}, nil
	case decide.Held:
		r.held(ctx, j, d.Unmet)
		return reconcile.Result{}, nil
	}
	logf.FromContext(ctx).V(1).Info("Config differs from the basis", "basis", j.basis, "certain", j.certain, "want", j.want.Hash,
		"changedLive", j.tr.changed, "liveRead", j.live, "decision", string(d.Action), "why", string(d.Why))
	switch d.Action {
	case decide.Record:
		res, err := r.recordUnlessChanging(ctx, j)
		if err == nil && res.IsZero() && !r.state.changedSince(j.key) {
			r.markCurrent(ctx, j)
		}
		return res, err
	case decide.TooLarge:
		// The webhook would leave it unstamped (the API server would refuse the
		// template with the stamp in it): a nudge would change nothing.
		return reconcile.Result{}, r.tooLarge(ctx, j.obj, "pod template", j.want.Hash)
	case decide.Roll:
		ctx, why, retry := r.waveHold(ctx, j)
		if why != "" {
			r.heldByWave(ctx, j, why)
			return reconcile.Result{RequeueAfter: retry}, nil
		}
		if r.kind.Paused(j.obj) {
			r.paused(ctx, j)
			return reconcile.Result{}, nil
		}
		return r.roll(ctx, j, d.Restart)
	}
	checks.WithLabelValues("error").Inc()
	return reconcile.Result{}, fmt.Errorf("%s %s: no decision (%s)", r.kind, j.key, d.Action)
}

// current acts on pods that run the current config: a basis that is not certain (a
// stamp without a record: made by a version that wrote none, or the record was dropped)
// is recorded, so later decisions are certain, unless a live change is pending; so is
// a record whose older pods have all been replaced (caughtUp), without them; and so is
// a record written past the webhook (its record marker stayed): written again through it.
func (r *workloadReconciler) current(ctx context.Context, j judged) error {
	r.state.resetBypasses(j.key)
	if (!j.certain || j.caughtUp || stamp.ParseMarker(j.obj.GetAnnotations()).Record) && !r.state.changedSince(j.key) {
		return r.record(ctx, j.obj, j.tmpl, j.want, stamp.HasSecrets(j.refs))
	}
	logf.FromContext(ctx).V(1).Info("Config current", "hash", j.basis)
	checks.WithLabelValues("current").Inc()
	return nil
}

// held reports a rollout held back because new pods could not start without the
// missing config: it waits for the config to return (unchanged: nothing rolls; changed:
// one rollout).
func (r *workloadReconciler) held(ctx context.Context, j judged, unmet []string) {
	checks.WithLabelValues("held").Inc()
	r.recorder.Eventf(j.obj, nil, corev1.EventTypeWarning, ReasonConfigMissing, "Hold",
		"Not rolling: %s; new pods could not start. Waiting for it to return", strings.Join(unmet, "; "))
	logf.FromContext(ctx).Info("Held a rollout: required config is missing", "missing", unmet, "basis", j.basis)
	r.notifyHeld(j.obj, notify.HeldMissing, strings.Join(unmet, "; "), strings.Join(unmet, "; "))
}

// paused holds the rollout of a paused workload: nudged now, it would take the new stamp
// while its pods stay on the old config, and a record would then claim they run what they
// do not. Its resume is an event that checks it again (events), and rolls it then.
func (r *workloadReconciler) paused(ctx context.Context, j judged) {
	checks.WithLabelValues("paused").Inc()
	r.recorder.Eventf(j.obj, nil, corev1.EventTypeNormal, ReasonRolloutPaused, "Hold",
		"Not rolling while paused: its config changed (%s -> %s); it rolls once when resumed", stamp.ShortHash(j.basis), stamp.ShortHash(j.want.Hash))
	logf.FromContext(ctx).Info("Held a rollout: the workload is paused", "basis", j.basis, "want", j.want.Hash)
	r.notifyPaused(ctx, j)
}

// recordUnlessChanging records that the pods run the current config, unless a change
// is on its way that recording now would hide: a live change that arrived while this
// check ran (the check it queued rolls), or a write the content read saw that has not
// reached the watch yet (its event starts a burst; checked again in a second).
func (r *workloadReconciler) recordUnlessChanging(ctx context.Context, j judged) (reconcile.Result, error) {
	if r.state.changedSince(j.key) {
		return reconcile.Result{}, nil
	}
	if behind, err := r.evidence.cacheBehind(ctx, j.obj.GetNamespace(), j.refs); err != nil || behind {
		return reconcile.Result{RequeueAfter: time.Second}, err
	}
	return reconcile.Result{}, r.record(ctx, j.obj, j.tmpl, j.want, stamp.HasSecrets(j.refs))
}

// roll nudges the workload once the minimum interval since its last rollout is over.
func (r *workloadReconciler) roll(ctx context.Context, j judged, restart bool) (reconcile.Result, error) {
	if wait := r.untilNextRoll(j.key); wait > 0 {
		logf.FromContext(ctx).V(1).Info("Rollout deferred: minimum interval between rollouts", "wait", wait.String())
		checks.WithLabelValues("deferred").Inc()
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	return r.nudge(ctx, j.obj, j.want, j.basis, j.storedSources, restart)
}

// record writes the config the pods run into the workload's metadata (no rollout), on
// condition of the resourceVersion it was decided on (a conflict is a recordConflict).
// The marker (the webhook strips it) tells the webhook the record is configstamp's own;
// it keeps anyone else's updates from changing a record.
func (r *workloadReconciler) record(ctx context.Context, obj client.Object, tmpl *corev1.PodTemplateSpec, want stamp.Stamp, hasSecrets bool) error {
	if want.Hash == "" { // every source ignored: nothing to record
		return nil
	}
	rec := stamp.Observed{Hash: want.Hash, Template: workload.TemplateFingerprint(tmpl), Secrets: hasSecrets, Key: want.Key}
	if !stamp.AnnotationsFit(obj.GetAnnotations(), map[string]string{stamp.ObservedAnnotation: rec.String(), stamp.NudgeAnnotation: ""}) {
		// The API server would refuse it: no record (decisions stay on the stamp and the
		// times of pods and config), and no retry until the workload changes.
		return r.tooLarge(ctx, obj, "metadata", want.Hash)
	}
	stored := tmpl.Annotations[stamp.HashAnnotation]
	patch := fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"annotations":{%q:%q,%q:%q}}}`, obj.GetResourceVersion(),
		stamp.ObservedAnnotation, rec.String(), stamp.NudgeAnnotation, stamp.NudgeRecord)
	pctx, warned := collectWarnings(ctx)
	answer, err := r.patchAnswer(pctx, client.ObjectKeyFromObject(obj), client.RawPatch(types.MergePatchType, []byte(patch)))
	if err != nil {
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
	if stamp.ParseMarker(answer.GetAnnotations()).Present {
		// Stored without the webhook's say: a record it did not check, and its marker left
		// in the metadata. current records again while the marker is there.
		if warned.has(stamp.WarningScopeUnknown) {
			// A replica whose namespace cache lags: no bypass, retried with backoff.
			checks.WithLabelValues("unread").Inc()
			return fmt.Errorf("record observed config of %s %s/%s: the webhook replica could not place its namespace yet; retrying", r.kind, obj.GetNamespace(), obj.GetName())
		}
		// The webhook was not called (down, or answering past the registration's timeout,
		// failurePolicy Ignore): a bypass, retried.
		return r.bypassed(ctx, answer, stored, want.Hash, "the configstamp webhook did not admit the record write (its marker stayed)")
	}
	checks.WithLabelValues("recorded").Inc()
	logf.FromContext(ctx).Info("Recorded the config the pods run", "hash", want.Hash, "stamp", stored)
	return nil
}

// liveGet reads the workload from the API server, trimmed as the cache keeps it
// (workload.Kind.Trim): every reader sees one form.
func (r *workloadReconciler) liveGet(ctx context.Context, key types.NamespacedName) (client.Object, error) {
	obj := r.kind.New()
	if err := r.live.Get(ctx, key, obj); err != nil {
		return nil, err
	}
	return r.trimmed(obj), nil
}

// patchAnswer applies patch to the workload key through the webhook and returns the
// API server's answer, trimmed as the cache keeps it. The answer is decoded into a new
// object: a client decodes into the object it is given and keeps the map entries the
// answer lacks, so a cached (trimmed) one would keep its padding beside the annotations
// it stands for, its template's cache-only fingerprint whatever another writer changed
// meanwhile, and a nudge marker the webhook took off.
func (r *workloadReconciler) patchAnswer(ctx context.Context, key types.NamespacedName, patch client.Patch) (client.Object, error) {
	var answer client.Object
	err := r.throughWebhook(ctx, func() error {
		answer = r.kind.New()
		answer.SetNamespace(key.Namespace)
		answer.SetName(key.Name)
		return r.client.Patch(ctx, answer, patch)
	})
	if err != nil {
		return nil, err
	}
	return r.trimmed(answer), nil
}

// trimmed is obj as the cache keeps it (TrimWorkloads).
func (r *workloadReconciler) trimmed(obj client.Object) client.Object {
	return trimWorkload(r.kind, r.scope.Label, obj, true)
}

// expected is the stamp of the config obj consumes, read live.
func (r *workloadReconciler) expected(ctx context.Context, obj client.Object, refs []stamp.Source) (stamp.Stamp, error) {
	stored := ""
	if tmpl := r.kind.Template(obj); tmpl != nil {
		stored = tmpl.Annotations[stamp.SourcesAnnotation]
	}
	st, err := r.config.StampOver(ctx, obj.GetNamespace(), refs, stored)
	if err != nil {
		return stamp.Stamp{}, fmt.Errorf("compute stamp of %s %s/%s: %w", r.kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return st, nil
}
