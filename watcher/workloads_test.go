package watcher

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/webhook"
)

func TestBypassRetriesAreBounded(t *testing.T) {
	rec := events.NewFakeRecorder(100)
	r := &workloadReconciler{kind: workload.Deployment, recorder: rec}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app"}}
	for i := 1; i <= maxBypassRetries; i++ {
		if err := r.bypassed(context.Background(), dep, "old", "new"); err == nil {
			t.Fatalf("attempt %d: no error, so no retry", i)
		}
	}
	if err := r.bypassed(context.Background(), dep, "old", "new"); err != nil {
		t.Fatalf("attempt %d: still retrying: %v", maxBypassRetries+1, err)
	}
	var last string
	for len(rec.Events) > 0 {
		last = <-rec.Events
	}
	if !strings.Contains(last, "left alone until its next change") {
		t.Fatalf("last event %q does not say it gave up", last)
	}
	// The count starts again: the next event gets a full set of retries.
	if err := r.bypassed(context.Background(), dep, "old", "new"); err == nil {
		t.Fatal("the count did not start again after giving up")
	}
}

func TestMinimumIntervalBetweenRollouts(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "app"}
	r := &workloadReconciler{kind: workload.Deployment, minInterval: time.Hour}
	if w := r.untilNextRoll(key); w != 0 {
		t.Fatalf("never rolled: wait %v", w)
	}
	r.rolled(key)
	if w := r.untilNextRoll(key); w <= 59*time.Minute {
		t.Fatalf("just rolled: wait %v, want about an hour", w)
	}
	if w := (&workloadReconciler{kind: workload.Deployment}).untilNextRoll(key); w != 0 {
		t.Fatalf("no interval: wait %v", w)
	}
}

// TestReconcileGivesUpOnABypass drives Reconcile as the workqueue does (a retry after
// every error): with no webhook to stamp the nudge, it retries a bounded number of times
// and then stops.
func TestReconcileGivesUpOnABypass(t *testing.T) {
	dep := cfgDeployment()
	stale := strings.Repeat("a", 64)
	dep.Spec.Template.Annotations = map[string]string{stamp.HashAnnotation: stale}
	dep.Annotations = map[string]string{stamp.ObservedAnnotation: stamp.Observed{Hash: stale, Template: stamp.TemplateFingerprint(&dep.Spec.Template)}.String()}
	c := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(optedInNamespace(), cfgMap("2"), dep).Build()
	r, _ := newTestReconciler(t, c)
	key := appKey
	r.triggers.add(key, trigger{event: true})
	var errs int
	for i := 0; i < 3*maxBypassRetries; i++ {
		if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: key}); err != nil {
			errs++
			continue
		}
		break
	}
	if errs != maxBypassRetries {
		t.Fatalf("%d retries, want %d, then none", errs, maxBypassRetries)
	}
	// The next event starts a new round of retries.
	r.triggers.add(key, trigger{event: true})
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: key}); err == nil {
		t.Fatal("an event after giving up was not retried")
	}
}

// TestReconcileKeepsRetryingAnUnreadableConfig: a webhook that is called (it strips the
// marker) but cannot read config keeps the stored stamp. That is no bypass: no
// StampBypassed Event, and the change is never given up: retried with backoff, then
// every unreadRetry with one ConfigUnreadable Event, until the webhook can read again.
func TestReconcileKeepsRetryingAnUnreadableConfig(t *testing.T) {
	dep := cfgDeployment()
	stale := strings.Repeat("a", 64)
	dep.Spec.Template.Annotations = map[string]string{stamp.HashAnnotation: stale}
	dep.Annotations = map[string]string{stamp.ObservedAnnotation: stamp.Observed{Hash: stale, Template: stamp.TemplateFingerprint(&dep.Spec.Template)}.String()}
	base := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(optedInNamespace(), cfgMap("2"), dep).Build()
	readable := false
	hook := withWebhook(t, &webhook.Stamper{Reader: base})
	c := interceptor.NewClient(base, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if readable {
				return hook.Patch(ctx, c, obj, patch, opts...)
			}
			// The webhook, unable to read config, admits the nudge keeping what is
			// stored: the marker stripped, nothing else.
			if err := c.Patch(ctx, obj, patch, opts...); err != nil {
				return err
			}
			a := obj.GetAnnotations()
			delete(a, stamp.NudgeAnnotation)
			obj.SetAnnotations(a)
			return c.Update(ctx, obj)
		},
	})
	r, rec := newTestReconciler(t, c)
	r.triggers.add(appKey, trigger{event: true})
	check := func() (reconcile.Result, error) {
		return r.Reconcile(context.Background(), reconcile.Request{NamespacedName: appKey})
	}
	for i := 1; i <= maxBypassRetries; i++ {
		if res, err := check(); err == nil || res.RequeueAfter != 0 {
			t.Fatalf("nudge %d: %v %+v, want an error (a retry with backoff)", i, err, res)
		}
	}
	for i := 0; i < 3; i++ {
		if res, err := check(); err != nil || res.RequeueAfter != unreadRetry {
			t.Fatalf("after %d nudges: %v %+v, want a retry in %s", maxBypassRetries+1+i, err, res, unreadRetry)
		}
	}
	unreadable := 0
	for len(rec.Events) > 0 {
		e := <-rec.Events
		if strings.Contains(e, ReasonStampBypassed) {
			t.Errorf("event %q: a webhook that could not read config taken for a bypass", e)
		}
		if strings.Contains(e, ReasonConfigUnreadable) {
			unreadable++
		}
	}
	if unreadable != 1 {
		t.Errorf("%d ConfigUnreadable Events, want 1", unreadable)
	}
	readable = true
	if res, err := check(); err != nil || res.RequeueAfter != 0 {
		t.Fatalf("webhook reading again: %v %+v", err, res)
	}
	if got := getDep(t, c, appKey).Spec.Template.Annotations[stamp.HashAnnotation]; got == stale {
		t.Fatal("not rolled once the webhook could read config")
	}
}
