package main

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/stamp"
)

// syncedInformer is an informer that has synced (only HasSynced is called).
type syncedInformer struct {
	cache.Informer
	synced bool
}

func (i syncedInformer) HasSynced() bool { return i.synced }

// The webhook places a review by the synced informer alone: a namespace it lacks (just
// created, or made up by a forged review) is of unknown scope, answered unstamped with
// nothing read, never judged out of scope.
func TestAdmissionScope(t *testing.T) {
	sc, err := scope.New("configstamp.io/inject", []string{"kube-system"})
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	_ = corev1.AddToScheme(scheme)
	in := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "in", Labels: map[string]string{sc.Label: stamp.InjectValue}}}
	off := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "off"}}
	a := &admissionScope{scope: sc, cache: fake.NewClientBuilder().WithScheme(scheme).WithObjects(in, off).Build(), informer: syncedInformer{synced: true}}
	labelled := map[string]string{sc.Label: stamp.InjectValue}
	for _, c := range []struct {
		ns      string
		labels  map[string]string
		in      bool
		unknown bool
	}{
		{"in", nil, true, false},
		{"off", nil, false, false},
		{"off", labelled, true, false},
		{"kube-system", labelled, false, false},
		{"just-created", nil, false, true},
		{"just-created", labelled, false, true},
	} {
		got, err := a.InScope(context.Background(), c.ns, c.labels)
		if got != c.in || errors.Is(err, errNamespaceUnknown) != c.unknown || (err != nil) != c.unknown {
			t.Errorf("%s (labels %v): in scope %v, error %v; want %v, unknown %v", c.ns, c.labels, got, err, c.in, c.unknown)
		}
	}
	a.informer = syncedInformer{}
	if _, err := a.InScope(context.Background(), "in", nil); !errors.Is(err, errNamespacesNotSynced) {
		t.Errorf("before the informer synced: %v, want %v", err, errNamespacesNotSynced)
	}
}

// A namespace that reaches the cache a moment after the review (created with its
// Deployments in one manifest) is placed, not answered unknown.
func TestAdmissionScopeWaitsForANewNamespace(t *testing.T) {
	sc, err := scope.New("configstamp.io/inject", nil)
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	_ = corev1.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	a := &admissionScope{scope: sc, cache: c, informer: syncedInformer{synced: true}}
	go func() {
		time.Sleep(100 * time.Millisecond)
		_ = c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "new", Labels: map[string]string{sc.Label: stamp.InjectValue}}})
	}()
	if in, err := a.InScope(context.Background(), "new", nil); !in || err != nil {
		t.Errorf("a namespace cached 100ms after the review: in scope %v, error %v; want in, no error", in, err)
	}
}

// With maxNamespaceWaiters reviews already waiting for namespaces the cache lacks, the
// next is answered unknown without waiting: a namespace that reaches the cache a moment
// later is not seen (it is, when a waiter's place is free).
func TestAdmissionScopeBoundsWaiters(t *testing.T) {
	sc, err := scope.New("configstamp.io/inject", nil)
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	_ = corev1.AddToScheme(scheme)
	for _, waiting := range []int32{maxNamespaceWaiters, maxNamespaceWaiters - 1} {
		c := fake.NewClientBuilder().WithScheme(scheme).Build()
		a := &admissionScope{scope: sc, cache: c, informer: syncedInformer{synced: true}}
		a.waiting.Store(waiting)
		go func() {
			time.Sleep(50 * time.Millisecond)
			_ = c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "new", Labels: map[string]string{sc.Label: stamp.InjectValue}}})
		}()
		in, err := a.InScope(context.Background(), "new", nil)
		if full := waiting == maxNamespaceWaiters; full != errors.Is(err, errNamespaceUnknown) || full == in {
			t.Errorf("%d waiting: in scope %v, error %v; want unknown: %v", waiting, in, err, full)
		}
		time.Sleep(100 * time.Millisecond) // the namespace created before the next round
		if a.waiting.Load() != waiting {
			t.Errorf("%d waiting before, %d after", waiting, a.waiting.Load())
		}
	}
}
