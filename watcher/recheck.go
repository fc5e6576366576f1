package watcher

import (
	"context"
	"encoding/binary"
	"hash/fnv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// recheckJitter spreads the passes of the re-check: each waits the interval plus up to
// this fraction of it.
const recheckJitter = 0.2

// recheck is the watcher's safety net against a change its events missed: every
// interval (jittered) the leader goes over the workloads of one kind in its cache and
// queues a check of each whose state moved since its last check ended: its generation,
// its stamp or record, or the resourceVersion of a source it consumes, all read from the
// caches. A workload whose check ended with nothing left to do, and nothing of which
// moved since, costs no read; so a pass over a quiet cluster reads nothing from the API
// server. What a pass finds and rolls is counted (configstamp_recheck_found_total).
type recheck struct {
	rec      *workloadReconciler
	queue    *fairQueue
	interval time.Duration
}

var _ manager.LeaderElectionRunnable = &recheck{}

// NeedLeaderElection is true: only the leader checks.
func (p *recheck) NeedLeaderElection() bool { return true }

// Start runs a pass every interval, the first one interval after it starts (the initial
// list has just checked everything).
func (p *recheck) Start(ctx context.Context) error {
	for {
		t := time.NewTimer(wait.Jitter(p.interval, recheckJitter))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		p.pass(ctx)
	}
}

// pass queues a check of every workload of the kind whose fingerprint differs from the
// one its last finished check left.
func (p *recheck) pass(ctx context.Context) {
	r := p.rec
	log := logf.FromContext(ctx).WithName("recheck").WithValues("kind", r.kind.Kind)
	items, err := r.store().list(ctx, "")
	if err != nil {
		log.Error(err, "Re-check: could not list from the cache")
		return
	}
	queued := 0
	for _, obj := range items {
		key := client.ObjectKeyFromObject(obj)
		fp, ok := r.fingerprint(ctx, obj)
		if !ok || r.state.checkedAs(key) == fp && !r.state.isAbandoned(key) {
			continue
		}
		r.state.addTrigger(key, trigger{recheck: true})
		p.queue.Add(reconcile.Request{NamespacedName: key})
		queued++
	}
	recheckQueued.WithLabelValues(r.kind.Kind).Add(float64(queued))
	if r.checks != nil {
		r.checks.Add(1) // a pass decodes every cached workload's references: a burst for the releaser
	}
	log.V(1).Info("Re-check pass", "workloads", len(items), "queued", queued)
}

// fingerprint sums up, from the caches, what a check of obj depends on: its pod template
// (configstamp's annotations apart), its stamp, configstamp's annotations of its metadata
// (the record, skip, extra sources), whether it is paused, and each consumed source with
// its resourceVersion ("" when absent). Not its generation: a Deployment's moves with
// every replicas change (an autoscaler) and every annotation, which would queue every
// autoscaled workload at every pass. ok is false when obj is not one the watcher checks
// (no sources, out of scope) or a source is still debouncing (its hand-off checks obj),
// and when a cache read fails.
func (r *workloadReconciler) fingerprint(ctx context.Context, obj client.Object) (fp uint64, ok bool) {
	tmpl, refs, ok := r.recheckable(ctx, obj)
	if !ok {
		return 0, false
	}
	h := fnv.New64a()
	field := func(s string) {
		_ = binary.Write(h, binary.BigEndian, uint32(len(s)))
		_, _ = h.Write([]byte(s))
	}
	field(workload.TemplateFingerprint(tmpl))
	field(tmpl.Annotations[stamp.HashAnnotation])
	for _, key := range []string{stamp.ObservedAnnotation, stamp.SkipAnnotation, stamp.ExtraSourcesAnnotation} {
		v, ok := obj.GetAnnotations()[key]
		_ = binary.Write(h, binary.BigEndian, ok)
		field(v)
	}
	_ = binary.Write(h, binary.BigEndian, r.kind.Paused(obj))
	for _, src := range refs {
		key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: src.Name}
		meta := configread.NewMeta(src.Kind)
		err := r.client.Get(ctx, key, meta, client.UnsafeDisableDeepCopy)
		if err != nil && !apierrors.IsNotFound(err) {
			return 0, false
		}
		field(src.ID())
		field(meta.GetResourceVersion())
	}
	return h.Sum64(), true
}

// recheckable returns obj's template and the sources it consumes when the watcher
// checks it (sources, in scope) and none of them is debouncing (its hand-off checks obj).
func (r *workloadReconciler) recheckable(ctx context.Context, obj client.Object) (*corev1.PodTemplateSpec, []stamp.Source, bool) {
	tmpl := r.kind.Template(obj)
	if tmpl == nil {
		return nil, nil, false
	}
	refs := stamp.Consumed(obj.GetAnnotations(), &tmpl.Spec, r.sources)
	if len(refs) == 0 {
		return nil, nil, false
	}
	if in, err := inScope(ctx, r.client, r.scope, obj); err != nil || !in {
		return nil, nil, false
	}
	for _, src := range refs {
		if r.pending != nil && r.pending(src.Kind, types.NamespacedName{Namespace: obj.GetNamespace(), Name: src.Name}) {
			return nil, nil, false
		}
	}
	return tmpl, refs, true
}

// recheckCheck is what a check keeps for the re-check: the workload's fingerprint
// before the check's reads (ok: it has one), its rollouts then, and its trigger.
type recheckCheck struct {
	key   types.NamespacedName
	fp    uint64
	ok    bool
	rolls uint64
	tr    trigger
}

// beginRecheck takes, when the re-check is on, what finishRecheck needs of key's check.
func (r *workloadReconciler) beginRecheck(ctx context.Context, key types.NamespacedName, tr trigger) recheckCheck {
	rc := recheckCheck{key: key, tr: tr}
	if !r.recheck {
		return rc
	}
	if obj, err := r.store().get(ctx, key, false); err == nil {
		rc.fp, rc.ok = r.fingerprint(ctx, obj)
	}
	rc.rolls = r.state.rollsOf(key)
	return rc
}

// finishRecheck keeps, after a check that ended with nothing left to do, the
// fingerprint taken before it (a change during the check moves it: the next pass checks
// again), unless the check left the workload alone after its bypass retries, the
// workload is gone now, or a source of it is debouncing (the check was left to its
// hand-off, which may not have judged yet); and counts a rollout only the re-check found.
// The fingerprint is kept first and the workload looked for after: a delete handled in
// between (forget) would otherwise leave the fingerprint of a workload that is gone; the
// cache drops an object before its delete is handled, so one of the two drops it.
func (r *workloadReconciler) finishRecheck(ctx context.Context, rc recheckCheck) {
	if !r.recheck {
		return
	}
	if rc.ok && !r.state.isAbandoned(rc.key) {
		r.state.setChecked(rc.key, rc.fp)
		obj, err := r.store().get(ctx, rc.key, false)
		if err != nil {
			r.state.uncheck(rc.key)
		} else if _, _, ok := r.recheckable(ctx, obj); !ok {
			r.state.uncheck(rc.key)
		}
	}
	if rc.tr.recheckOnly() && r.state.rollsOf(rc.key) != rc.rolls {
		recheckFound.WithLabelValues(r.kind.Kind).Inc()
		logf.FromContext(ctx).Info("Re-check found a change no event had rolled, and rolled it")
	}
}
