package watcher

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/stamp"
)

// A workload whose stamp (pod template) or record (metadata) would not fit is neither
// nudged nor recorded: a StampTooLarge event, no write, no retry; any later update of it
// is checked again (it may have made room), where an update that leaves its template as
// it is would otherwise be ignored.
func TestTooLargeIsReportedNotRetried(t *testing.T) {
	scheme := testScheme()
	ns := optedInNamespace()
	cm := cfgMap("2")
	base := cfgDeployment
	current, err := (&configread.Reader{Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(cm).Build(), Key: testKey}).Stamp(
		context.Background(), "ns", stamp.Consumed(nil, &base().Spec.Template.Spec, stamp.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, part string
		dep        func() *appsv1.Deployment
	}{
		{"pod template", "pod template annotations", func() *appsv1.Deployment {
			// Its record says its pods run other config: it must roll, but the stamp
			// does not fit.
			d := base()
			stale := strings.Repeat("a", 64)
			d.Spec.Template.Annotations = map[string]string{stamp.HashAnnotation: stale, // 20 bytes short of the limit
				"pad": strings.Repeat("a", stamp.AnnotationSizeLimit-20-len(stamp.HashAnnotation)-len(stale)-len("pad"))}
			d.Annotations = map[string]string{stamp.ObservedAnnotation: stamp.Observed{Hash: stale, Template: stamp.TemplateFingerprint(&d.Spec.Template)}.String()}
			return d
		}},
		{"metadata", "metadata annotations", func() *appsv1.Deployment {
			// Stamped with the current config, without a record: one is due, but
			// does not fit.
			d := base()
			d.Spec.Template.Annotations = map[string]string{stamp.HashAnnotation: current.Hash, stamp.SourcesAnnotation: current.SourcesAnnotation()}
			d.Annotations = map[string]string{"pad": strings.Repeat("a", stamp.AnnotationSizeLimit-20-len("pad"))}
			return d
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dep := c.dep()
			cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(ns, cm, dep).Build()
			r, rec := newTestReconciler(t, cl)
			key := appKey
			before := getDep(t, cl, key)
			for i := range 2 {
				r.state.addTrigger(key, trigger{event: true, changed: true})
				res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: key})
				if err != nil || res != (reconcile.Result{}) {
					t.Fatalf("check %d: %+v, %v: want done, no retry", i, res, err)
				}
				if len(rec.Events) != 1 {
					t.Fatalf("check %d: %d events, want one", i, len(rec.Events))
				}
				if ev := <-rec.Events; !strings.Contains(ev, "Warning "+ReasonStampTooLarge) || !strings.Contains(ev, c.part) {
					t.Fatalf("check %d: event %q", i, ev)
				}
			}
			if after := getDep(t, cl, key); after.ResourceVersion != before.ResourceVersion {
				t.Fatalf("written: %v", after.Annotations)
			}

			// An update of its annotations (which may make room) is checked again; of
			// another workload, or an update of anything else (a label, its status), is
			// not.
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			h := r.events(0)
			labelled := before.DeepCopy()
			labelled.Labels = map[string]string{"x": "y"}
			h.UpdateFunc(context.Background(), event.UpdateEvent{ObjectOld: before, ObjectNew: labelled}, q)
			if q.Len() != 0 {
				t.Fatalf("a label change of a workload left alone for size was queued")
			}
			trimmed := before.DeepCopy()
			trimmed.Annotations = maps.Clone(trimmed.Annotations)
			trimmed.Annotations["pad"] = "short"
			other, otherNew := before.DeepCopy(), trimmed.DeepCopy()
			other.Name, otherNew.Name = "other", "other"
			h.UpdateFunc(context.Background(), event.UpdateEvent{ObjectOld: other, ObjectNew: otherNew}, q)
			if q.Len() != 0 {
				t.Fatalf("an annotation change of a workload that fits was queued")
			}
			h.UpdateFunc(context.Background(), event.UpdateEvent{ObjectOld: before, ObjectNew: trimmed}, q)
			if q.Len() != 1 {
				t.Fatalf("an update of the annotations of a workload left alone for size was not queued")
			}
		})
	}
}

func getDep(t *testing.T, c client.Client, key types.NamespacedName) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	if err := c.Get(context.Background(), key, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

// Dev mode: no write through the webhook before its registration is applied and settled
// (Options.WebhookReady); a write waiting for it ends with its context.
func TestThroughWebhookWaitsForRegistration(t *testing.T) {
	ready := make(chan struct{})
	r := &workloadReconciler{webhookReady: ready}
	wrote := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- r.throughWebhook(context.Background(), func() error { wrote <- struct{}{}; return nil })
	}()
	select {
	case <-wrote:
		t.Fatal("wrote before the registration was ready")
	case <-time.After(200 * time.Millisecond):
	}
	close(ready)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	<-wrote
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.webhookReady = make(chan struct{})
	if err := r.throughWebhook(ctx, func() error { t.Error("wrote"); return nil }); err == nil {
		t.Error("no error once the context ended")
	}
}
