package watcher

import (
	"context"
	"encoding/binary"
	"hash/fnv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/configstamp/configstamp/internal/configread"
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
	queue    chan<- event.GenericEvent
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
	list := r.kind.NewList()
	if err := r.client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		log.Error(err, "Re-check: could not list from the cache")
		return
	}
	items := r.kind.Items(list)
	queued := 0
	for _, obj := range items {
		key := client.ObjectKeyFromObject(obj)
		fp, ok := r.fingerprint(ctx, obj)
		if abandoned, _, _ := r.state.abandonment(key); !ok || r.state.checkedAs(key) == fp && !abandoned {
			continue
		}
		r.state.addTrigger(key, trigger{recheck: true})
		select {
		case p.queue <- event.GenericEvent{Object: r.kind.Ref(key)}:
			queued++
		case <-ctx.Done():
			return
		}
	}
	recheckQueued.WithLabelValues(r.kind.Kind).Add(float64(queued))
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
	tmpl := r.kind.Template(obj)
	if tmpl == nil {
		return 0, false
	}
	refs := stamp.Consumed(obj.GetAnnotations(), &tmpl.Spec, r.sources)
	if len(refs) == 0 {
		return 0, false
	}
	if in, err := inScope(ctx, r.client, r.scope, obj); err != nil || !in {
		return 0, false
	}
	h := fnv.New64a()
	field := func(s string) {
		_ = binary.Write(h, binary.BigEndian, uint32(len(s)))
		_, _ = h.Write([]byte(s))
	}
	field(stamp.TemplateFingerprint(tmpl))
	field(tmpl.Annotations[stamp.HashAnnotation])
	for _, key := range []string{stamp.ObservedAnnotation, stamp.SkipAnnotation, stamp.ExtraSourcesAnnotation} {
		v, ok := obj.GetAnnotations()[key]
		_ = binary.Write(h, binary.BigEndian, ok)
		field(v)
	}
	_ = binary.Write(h, binary.BigEndian, r.kind.Paused(obj))
	for _, src := range refs {
		key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: src.Name}
		if r.pending != nil && r.pending(src.Kind, key) {
			return 0, false
		}
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

// finishCheck keeps, after a check of key that ended with nothing left to do, the
// fingerprint of obj taken before it (a change during the check moves it: the next pass
// checks again), unless the workload is gone now or a source of it is debouncing (the
// check was left to its hand-off, which may not have judged yet); and counts a rollout
// that only the re-check found.
func (r *workloadReconciler) finishCheck(ctx context.Context, key types.NamespacedName, fp uint64, fpOK bool, tr trigger, rollsBefore uint64) {
	if abandoned, _, _ := r.state.abandonment(key); fpOK && !abandoned {
		if obj := r.kind.New(); r.client.Get(ctx, key, obj, client.UnsafeDisableDeepCopy) == nil {
			if _, ok := r.fingerprint(ctx, obj); ok {
				r.state.setChecked(key, fp)
			}
		}
	}
	if tr.recheck && !tr.changed && !tr.event && !tr.handoff && r.state.rollsOf(key) != rollsBefore {
		recheckFound.WithLabelValues(r.kind.Kind).Inc()
		logf.FromContext(ctx).Info("Re-check found a change no event had rolled, and rolled it")
	}
}
