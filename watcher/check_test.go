package watcher

import (
	"context"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/stamp"
)

// A workload whose config changed and went missing is held: a ConfigMissing Event, no
// nudge, no retry.
func TestCheckHoldsWhenConfigIsMissing(t *testing.T) {
	dep := staleDeployment()
	c := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(optedInNamespace(), dep).Build()
	r, rec := newTestReconciler(t, c)
	r.state.addTrigger(appKey, trigger{event: true, changed: true})
	held, sent := checksCounted("held"), nudgesSent()
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: appKey})
	if err != nil || res.RequeueAfter != 0 {
		t.Fatalf("reconcile: %v, %v: want neither an error nor a requeue", res, err)
	}
	if got := checksCounted("held") - held; got != 1 {
		t.Errorf("checks_total{result=held} rose by %v, want 1", got)
	}
	if nudgesSent() != sent {
		t.Error("nudged a workload whose config is missing")
	}
	if e := <-rec.Events; !strings.Contains(e, ReasonConfigMissing) {
		t.Errorf("event %q, want %s", e, ReasonConfigMissing)
	}
	if got := getDep(t, c, appKey); got.Spec.Template.Annotations[stamp.HashAnnotation] != staleStamp {
		t.Errorf("stamp %q, want it kept", got.Spec.Template.Annotations[stamp.HashAnnotation])
	}
}

// nudgesSent reads configstamp_nudges_total.
func nudgesSent() float64 {
	var m dto.Metric
	if err := nudges.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
