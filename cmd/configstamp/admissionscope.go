package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/webhook"
)

var (
	errNamespacesNotSynced = errors.New("the namespace cache has not synced")
	errNamespaceUnknown    = errors.New("the namespace cache does not know the namespace yet")
)

// admissionScope is the webhook's own scope check, from the namespace labels of a
// metadata-only informer of Namespaces in the manager's cache (every replica runs it; it
// is small), never a read per review. An excluded namespace is known by its name alone.
// Until the cache has synced, or for a namespace it lacks, the scope is unknown: the
// review is answered allowed, unstamped, with a warning, nothing read. A namespace it
// lacks is one created a moment ago (a manifest of a Namespace and its Deployments: the
// informer's event can trail the Deployment's admission) or none at all (a forged
// review, which must not cost an API read). That is safe: the watcher adopts a workload
// it finds unstamped in scope by recording what its pods run, without a rollout (they
// started with the config as it is), and the next config change rolls it. A namespace
// relabelled a moment ago is judged by the labels the informer still has, as if the
// workload had been written just before the relabelling, which the watcher then meets
// the same way.
// A namespaced install's scope is its namespace list: no informer, no Namespace read.
type admissionScope struct {
	scope    *scope.Scope
	cache    client.Reader
	informer cache.Informer
	// waiting counts the reviews waiting for a namespace the cache lacks.
	waiting atomic.Int32
}

// newAdmissionScope starts the informer with the manager's cache.
func newAdmissionScope(ctx context.Context, mgr ctrl.Manager, sc *scope.Scope) (*admissionScope, error) {
	if sc.Namespaced() {
		return &admissionScope{scope: sc}, nil
	}
	inf, err := mgr.GetCache().GetInformer(ctx, namespaceMeta(), cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("namespace informer: %w", err)
	}
	return &admissionScope{scope: sc, cache: mgr.GetCache(), informer: inf}, nil
}

func namespaceMeta() *metav1.PartialObjectMetadata {
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return ns
}

var _ webhook.ScopeFunc = (*admissionScope)(nil).InScope

// newNamespaceWait is how long a review waits for a namespace its cache lacks.
const newNamespaceWait = 250 * time.Millisecond

// maxNamespaceWaiters is how many reviews at a time may wait for a namespace the cache
// lacks; the others are answered scope_unknown at once. A namespace created with its
// Deployments in one apply takes a waiter for milliseconds; a flood of forged reviews
// naming no namespace would otherwise hold every in-flight slot for the whole wait.
const maxNamespaceWaiters = 2

// InScope is the webhook's ScopeFunc.
func (a *admissionScope) InScope(ctx context.Context, namespace string, objLabels map[string]string) (bool, error) {
	if a.scope.IsExcluded(namespace) {
		return false, nil
	}
	if a.scope.Namespaced() {
		return a.scope.IncludesWorkload(namespace, nil, objLabels), nil
	}
	if !a.informer.HasSynced() {
		return false, errNamespacesNotSynced
	}
	ns := namespaceMeta()
	err := a.cache.Get(ctx, client.ObjectKey{Name: namespace}, ns)
	if apierrors.IsNotFound(err) {
		err = a.waitNamespace(ctx, namespace, ns)
	}
	if err != nil {
		return false, err
	}
	return a.scope.IncludesWorkload(namespace, ns.Labels, objLabels), nil
}

// waitNamespace waits up to newNamespaceWait for a namespace the cache lacks to reach it
// (a manifest of a Namespace and its Deployments: within milliseconds), if a waiter's
// place is free; errNamespaceUnknown when it does not.
func (a *admissionScope) waitNamespace(ctx context.Context, namespace string, ns *metav1.PartialObjectMetadata) error {
	if a.waiting.Add(1) > maxNamespaceWaiters {
		a.waiting.Add(-1)
		return errNamespaceUnknown
	}
	defer a.waiting.Add(-1)
	var getErr error
	err := wait.PollUntilContextTimeout(ctx, 25*time.Millisecond, newNamespaceWait, false, func(ctx context.Context) (bool, error) {
		getErr = a.cache.Get(ctx, client.ObjectKey{Name: namespace}, ns)
		return !apierrors.IsNotFound(getErr), nil
	})
	switch {
	case err != nil || apierrors.IsNotFound(getErr):
		return errNamespaceUnknown
	case getErr != nil:
		return fmt.Errorf("namespace %s: %w", namespace, getErr)
	}
	return nil
}

// ready is a readiness check: a replica serves admission once it can place reviews.
func (a *admissionScope) ready(*http.Request) error {
	if a.informer != nil && !a.informer.HasSynced() {
		return errNamespacesNotSynced
	}
	return nil
}
