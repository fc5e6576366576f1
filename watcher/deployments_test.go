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
)

func TestBypassRetriesAreBounded(t *testing.T) {
	rec := events.NewFakeRecorder(100)
	r := &deploymentReconciler{recorder: rec}
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
	r := &deploymentReconciler{minInterval: time.Hour}
	if w := r.untilNextRoll(key); w != 0 {
		t.Fatalf("never rolled: wait %v", w)
	}
	r.rolled(key)
	if w := r.untilNextRoll(key); w <= 59*time.Minute {
		t.Fatalf("just rolled: wait %v, want about an hour", w)
	}
	if w := (&deploymentReconciler{}).untilNextRoll(key); w != 0 {
		t.Fatalf("no interval: wait %v", w)
	}
}
