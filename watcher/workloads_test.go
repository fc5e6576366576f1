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
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
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
