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

	"github.com/configstamp/configstamp/internal/decide"
	"github.com/configstamp/configstamp/stamp"
)

// recordAttempts bounds the record writes of one check. A record is conditional on the
// resourceVersion its decision was made on; one that conflicts (the workload changed
// since) is decided again at once on a live read, which a competing writer is less
// likely to have overtaken than the cache, before the check fails and is retried with
// backoff.
const recordAttempts = 3

// recordConflict is a record write refused because the workload changed since the read
// its decision was made on.
type recordConflict struct{ error }

// Reconcile checks the workload; the trigger that queued it is kept for a retry.
func (r *workloadReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	tr := r.state.takeTrigger(req.NamespacedName)
	if tr.event {
		r.state.resetBypasses(req.NamespacedName)
	}
	mark := r.state.oversizeMark(req.NamespacedName)
	res, err := r.check(ctx, req.NamespacedName, tr)
	if err == nil {
		// Checked: it fits now, unless this check marked it again. An update that came
		// in meanwhile still saw the mark (and queued another check).
		r.state.clearOversize(req.NamespacedName, mark)
	}
	if err != nil || res.RequeueAfter > 0 {
		r.state.addTrigger(req.NamespacedName, trigger{changed: tr.changed, handoff: tr.handoff}) // a retry, not an event
	} else {
		// Nothing owed: the next nudge that does not roll starts its count afresh.
		r.state.resetBypasses(req.NamespacedName)
	}
	return res, err
}

// check judges the workload as the cache shows it; a record that conflicts is judged
// again on a live read, up to recordAttempts records in all.
func (r *workloadReconciler) check(ctx context.Context, key types.NamespacedName, tr trigger) (reconcile.Result, error) {
	obj := r.kind.New()
	if err := r.client.Get(ctx, key, obj); err != nil {
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
		r.state.resetBypasses(key)
		if !certain && !r.state.changedSince(key) {
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
		if r.state.changedSince(key) {
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

func (r *workloadReconciler) expected(ctx context.Context, obj client.Object, refs []stamp.Source) (stamp.Stamp, error) {
	st, err := r.config.Stamp(ctx, obj.GetNamespace(), refs)
	if err != nil {
		return stamp.Stamp{}, fmt.Errorf("compute stamp of %s %s/%s: %w", r.kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return st, nil
}
