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

// halt and resume name the change the newest Event on the source names, by its first
// occurrence (a series keeps the first note); once the source's Events expired (an hour
// by default), resume names the one change failures are recorded for.
func TestLatestChange(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = eventsv1.AddToScheme(scheme)
	_ = clientgoscheme.AddToScheme(scheme)
	_ = argo.AddToScheme(scheme)
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	ev := func(name, reason, note string, minutes, lastMinutes int) client.Object {
		e := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			EventTime: metav1.NewMicroTime(at.Add(time.Duration(minutes) * time.Minute)),
			Regarding: corev1.ObjectReference{Kind: "ConfigMap", Namespace: "shop", Name: "shared"}, Reason: reason, Note: note}
		if lastMinutes > 0 {
			e.Series = &eventsv1.EventSeries{Count: 2, LastObservedTime: metav1.NewMicroTime(at.Add(time.Duration(lastMinutes) * time.Minute))}
		}
		return e
	}
	failed := func(name, record string) client.Object {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Annotations: map[string]string{waves.FailedAnnotation: record}}}
	}
	for _, c := range []struct {
		name    string
		objs    []client.Object
		resume  bool
		want    string
		wantErr bool
	}{
		{"on the source", []client.Object{
			ev("e1", watcher.ReasonRollingInWaves, "Change configmap/shared=aaaaaaaaaaaa rolls its 21 consumers in 5 waves", 0, 0),
		}, false, "configmap/shared=aaaaaaaaaaaa", false},
		// The halt of the newer change is a series of the older one's Event: its note is the older's.
		{"a newer change's halt folded into the older's", []client.Object{
			ev("e1", watcher.ReasonRolloutHalted, "Change configmap/shared=aaaaaaaaaaaa halted in wave 1 of 5", 0, 4),
			ev("e2", watcher.ReasonRollingInWaves, "Change configmap/shared=bbbbbbbbbbbb rolls its 21 consumers in 5 waves", 2, 0),
		}, true, "configmap/shared=bbbbbbbbbbbb", false},
		{"the source's Events expired: the change failures are recorded for", []client.Object{
			failed("a", waves.FailedRecord("deployment/a", "configmap/shared=cccccccccccc", "did not become available: x")),
			failed("b", waves.FailedRecord("deployment/b", "configmap/shared=aaaaaaaaaaaa", "")),
			failed("c", waves.FailedRecord("deployment/c", "configmap/other=dddddddddddd", "did not become available: x")),
		}, true, "configmap/shared=cccccccccccc", false},
		{"expired, a halt", []client.Object{
			failed("a", waves.FailedRecord("deployment/a", "configmap/shared=cccccccccccc", "did not become available: x")),
		}, false, "", true},
	} {
		cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(c.objs...).Build()
		got, err := latestChange(context.Background(), cl, "shop", "configmap", "shared", c.resume)
		if got != c.want || (err != nil) != c.wantErr {
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
