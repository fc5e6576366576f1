package watcher

import (
	"context"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/stamp"
)

// TestRecheckQueuesWhatMoved: a pass queues a workload never checked; after a check that
// ended with nothing to do, nothing until a source it consumes changes; never one out of
// scope or whose source is still debouncing (its hand-off checks it).
func TestRecheckQueuesWhatMoved(t *testing.T) {
	ctx := context.Background()
	ns := optedInNamespace()
	c := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(ns, cfgMap("1"), cfgDeployment()).Build()
	r, _ := newTestReconciler(t, c)
	r.recheck = true
	// Stamped and recorded on cfg's current content: a check finds it current.
	stampCurrent(ctx, t, c, r)
	queue := testQueue(t)
	p := &recheck{rec: r, queue: queue}
	var work atomic.Uint64
	r.checks = &work
	passQueues := func(step string, want int) {
		t.Helper()
		before := work.Load()
		p.pass(ctx)
		if work.Load() == before {
			t.Fatalf("%s: the pass not counted as work for the releaser", step)
		}
		if got := queue.Len(); got != want {
			t.Fatalf("%s: %d queued, want %d", step, got, want)
		}
		for range want {
			item, _ := queue.Get()
			queue.Done(item)
			if tr := r.state.takeTrigger(appKey); !tr.recheck || tr.event || tr.changed {
				t.Fatalf("%s: trigger %+v, want a re-check only", step, tr)
			}
		}
	}
	passQueues("never checked", 1)

	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: appKey}); err != nil {
		t.Fatal(err)
	}
	passQueues("checked, nothing moved", 0)

	// An autoscaler's replicas (the generation moves, the template does not).
	if err := c.Patch(ctx, cfgDeployment(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":7}}`))); err != nil {
		t.Fatal(err)
	}
	passQueues("scaled", 0)

	cm := cfgMap("2")
	if err := c.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte(`{"data":{"k":"2"}}`))); err != nil {
		t.Fatal(err)
	}
	r.pending = func(string, types.NamespacedName) bool { return true }
	passQueues("the source changed, still debouncing", 0)
	r.pending = nil
	passQueues("the source changed", 1)

	ns.Labels = nil
	if err := c.Update(ctx, ns); err != nil {
		t.Fatal(err)
	}
	passQueues("out of scope", 0)
}

// TestRecheckRetriesAnAbandonedBypass: a workload left alone after its bypass retries ran
// out (the webhook unreachable for minutes) keeps no fingerprint, so every pass retries
// it: once, quietly (no error, no new Event) while it is still bypassed, until it is
// stamped; then it is done with.
func TestRecheckRetriesAnAbandonedBypass(t *testing.T) {
	ctx := context.Background()
	dep := staleDeployment()
	c := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(optedInNamespace(), cfgMap("2"), dep).Build()
	r, rec := newTestReconciler(t, c)
	r.recheck = true
	r.state.addTrigger(appKey, trigger{event: true})
	for i := 0; i <= maxBypassRetries; i++ {
		_, _ = r.Reconcile(ctx, reconcile.Request{NamespacedName: appKey})
	}
	if !r.state.isAbandoned(appKey) {
		t.Fatal("not left alone after its retries")
	}
	for len(rec.Events) > 0 {
		<-rec.Events
	}
	queue := testQueue(t)
	p := &recheck{rec: r, queue: queue}
	take := func() {
		item, _ := queue.Get()
		queue.Done(item)
	}
	for pass := 1; pass <= 2; pass++ {
		p.pass(ctx)
		if n := queue.Len(); n != 1 {
			t.Fatalf("pass %d: %d queued, want the abandoned workload", pass, n)
		}
		take()
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: appKey}); err != nil {
			t.Fatalf("pass %d: the quiet retry returned %v", pass, err)
		}
		if n := len(rec.Events); n != 0 {
			t.Fatalf("pass %d: %d new Events for a quiet retry", pass, n)
		}
	}
	// Stamped meanwhile (the webhook is back, someone's write): the next retry finds it
	// current, and it is done with.
	stampCurrent(ctx, t, c, r)
	p.pass(ctx)
	take()
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: appKey}); err != nil {
		t.Fatal(err)
	}
	p.pass(ctx)
	if queue.Len() != 0 {
		t.Fatal("queued again once current")
	}
}

// stampCurrent stamps and records appKey on its config as it is, as the webhook would.
func stampCurrent(ctx context.Context, t *testing.T, c client.Client, r *workloadReconciler) {
	t.Helper()
	d := cfgDeployment()
	if err := c.Get(ctx, appKey, d); err != nil {
		t.Fatal(err)
	}
	want, err := r.config.Stamp(ctx, "ns", stamp.Consumed(nil, &d.Spec.Template.Spec, r.sources))
	if err != nil {
		t.Fatal(err)
	}
	d.Spec.Template.Annotations = map[string]string{stamp.HashAnnotation: want.Hash}
	d.Annotations = map[string]string{stamp.ObservedAnnotation: stamp.Observed{Hash: want.Hash, Template: stamp.TemplateFingerprint(&d.Spec.Template), Key: want.Key}.String()}
	if err := c.Update(ctx, d); err != nil {
		t.Fatal(err)
	}
}

// TestRecheckKeepsNoFingerprintOfADeletedWorkload: a workload deleted while its check
// ends (its delete handled between the check's last read of it and the keeping of its
// fingerprint) leaves no fingerprint behind: nothing else would ever drop it.
func TestRecheckKeepsNoFingerprintOfADeletedWorkload(t *testing.T) {
	ctx := context.Background()
	var r *workloadReconciler
	deleting := false
	c := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(optedInNamespace(), cfgMap("1"), cfgDeployment()).
		WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			if obj.GetObjectKind().GroupVersionKind().Kind == "Namespace" && deleting {
				// The workload is deleted and its delete handled while the check reads
				// its namespace.
				deleting = false
				if err := c.Delete(ctx, cfgDeployment()); err != nil {
					return err
				}
				r.state.forget(appKey)
			}
			return nil
		}}).Build()
	r, _ = newTestReconciler(t, c)
	r.recheck = true
	deleting = true
	r.finishRecheck(ctx, recheckCheck{key: appKey, fp: 42, ok: true})
	if deleting {
		t.Fatal("the check read no namespace: the delete was not raced")
	}
	if fp, ok := r.state.checked[appKey]; ok {
		t.Fatalf("the deleted workload keeps fingerprint %d", fp)
	}
}
