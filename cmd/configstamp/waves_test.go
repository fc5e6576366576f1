package main

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/configstamp/configstamp/watcher"
)

// halt and resume name the change the newest Event names: the source's own Events are
// made once per change and expire (an hour by default); a change halted for longer is
// named by the RolloutHalted Events made again on the workloads it holds. A change of
// another source is never taken.
func TestLatestChange(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = eventsv1.AddToScheme(scheme)
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	ev := func(name, kind, regarding, reason, note string, minutes int) client.Object {
		return &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			EventTime: metav1.NewMicroTime(at.Add(time.Duration(minutes) * time.Minute)),
			Regarding: corev1.ObjectReference{Kind: kind, Namespace: "shop", Name: regarding}, Reason: reason, Note: note}
	}
	for _, c := range []struct {
		name   string
		events []client.Object
		want   string
	}{
		{"on the source", []client.Object{
			ev("e1", "ConfigMap", "shared", watcher.ReasonRollingInWaves, "Change configmap/shared=aaaaaaaaaaaa rolls its 21 consumers in 5 waves", 0),
		}, "configmap/shared=aaaaaaaaaaaa"},
		{"the source's Events expired: a held workload's", []client.Object{
			ev("e1", "Deployment", "d00", watcher.ReasonRolloutHalted, "Not rolling: halted: deployment/c did not become available (change configmap/shared=bbbbbbbbbbbb)", 90),
			ev("e2", "Deployment", "d01", watcher.ReasonRolloutHalted, "Not rolling: halted: deployment/x did not become available (change configmap/other=cccccccccccc)", 95),
		}, "configmap/shared=bbbbbbbbbbbb"},
		{"a newer change on a held workload", []client.Object{
			ev("e1", "ConfigMap", "shared", watcher.ReasonRolloutHalted, "Change configmap/shared=aaaaaaaaaaaa halted in wave 1 of 5", 0),
			ev("e2", "Deployment", "d00", watcher.ReasonRolloutHalted, "Not rolling: halted: halted by a user (configstamp halt) (change configmap/shared=dddddddddddd)", 10),
		}, "configmap/shared=dddddddddddd"},
	} {
		cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(c.events...).Build()
		got, err := latestChange(context.Background(), cl, "shop", "configmap", "shared")
		if err != nil || got != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		}
	}
}
