package main

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/configstamp/configstamp/internal/argo"
	"github.com/configstamp/configstamp/internal/waves"
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

// resume passes the failures of the change recorded so far, on every kind, and no other
// change's.
func TestResumeFailures(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = argo.AddToScheme(scheme)
	change, other := "configmap/shared=aaaaaaaaaaaa", "configmap/shared=bbbbbbbbbbbb"
	meta := func(name, record string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: "shop", Name: name, Annotations: map[string]string{waves.FailedAnnotation: record}}
	}
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&appsv1.Deployment{ObjectMeta: meta("a", waves.FailedRecord("deployment/a", change, "did not become available: x"))},
		&appsv1.Deployment{ObjectMeta: meta("b", waves.FailedRecord("deployment/b", other, "did not become available: x"))},
		&appsv1.Deployment{ObjectMeta: meta("c", waves.FailedRecord("deployment/c", change, ""))},
		&appsv1.StatefulSet{ObjectMeta: meta("s", waves.FailedRecord("statefulset/s", change, "not available within the waves deadline (10m0s)"))},
	).Build()
	n, err := resumeFailures(context.Background(), cl, "shop", change)
	if err != nil || n != 2 {
		t.Fatalf("%d resumed, %v; want 2", n, err)
	}
	for _, c := range []struct {
		obj  client.Object
		name string
		want string
	}{
		{&appsv1.Deployment{}, "a", waves.FailedRecord("deployment/a", change, "")},
		{&appsv1.Deployment{}, "b", waves.FailedRecord("deployment/b", other, "did not become available: x")},
		{&appsv1.StatefulSet{}, "s", waves.FailedRecord("statefulset/s", change, "")},
	} {
		if err := cl.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: c.name}, c.obj); err != nil {
			t.Fatal(err)
		}
		if got := c.obj.GetAnnotations()[waves.FailedAnnotation]; got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
