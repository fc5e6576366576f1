package watcher

import (
	"context"
	"fmt"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
)

// evidence answers, from the times the objects carry (all on the API server's clock),
// whether a workload's pods may run older config than the current one, when its pod
// template cannot say: it has no stamp, or a stamp made for another template.
type evidence struct {
	cache client.Reader // Namespace and ConfigMap metadata as the watch has it
	live  client.Reader // ConfigMap metadata, ReplicaSets, the registration
	// registration is the MutatingWebhookConfiguration's name.
	registration string

	mu         sync.Mutex
	registered time.Time // creation of the registration, once seen
}

// podsSince returns when the pods of the Deployment's current template began to be
// created: the creation of the ReplicaSet that runs that template, or the Deployment's
// creation when it has no ReplicaSet at all (no pods yet, or no controller). ok is false
// when ReplicaSets exist but none runs the current template yet: its pods are still to
// be created, and will read the config as it is.
func (e *evidence) podsSince(ctx context.Context, dep *appsv1.Deployment) (since time.Time, ok bool, err error) {
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("selector of deployment %s/%s: %w", dep.Namespace, dep.Name, err)
	}
	var rsList appsv1.ReplicaSetList
	if err := e.live.List(ctx, &rsList, client.InNamespace(dep.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return time.Time{}, false, fmt.Errorf("list replicasets of deployment %s/%s: %w", dep.Namespace, dep.Name, err)
	}
	owned := 0
	for i := range rsList.Items {
		rs := &rsList.Items[i]
		if owner := metav1.GetControllerOf(rs); owner == nil || owner.UID != dep.UID {
			continue
		}
		owned++
		if sameTemplate(&rs.Spec.Template, &dep.Spec.Template) {
			return rs.CreationTimestamp.Time, true, nil
		}
	}
	if owned == 0 {
		return dep.CreationTimestamp.Time, true, nil
	}
	return time.Time{}, false, nil
}

// sameTemplate compares a ReplicaSet's template with a Deployment's, ignoring the
// pod-template-hash label the Deployment controller adds.
func sameTemplate(rs, dep *corev1.PodTemplateSpec) bool {
	a, b := rs.DeepCopy(), dep.DeepCopy()
	delete(a.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	delete(b.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	return equality.Semantic.DeepEqual(a, b)
}

// configNewer reports whether a source was written at or after since (the API server's
// times have one-second resolution: a tie counts as newer, so a change is never lost).
// A source that is missing now counts as newer only when the workload's basis is known
// (it was deleted since; a deletion carries no time). It reads metadata live: a cached
// time could lag behind the content the decision was computed from.
func (e *evidence) configNewer(ctx context.Context, namespace string, srcs []stamp.Source, since time.Time, basisKnown bool) (bool, error) {
	for _, src := range srcs {
		cm := newConfigMapMeta()
		err := e.live.Get(ctx, client.ObjectKey{Namespace: namespace, Name: src.Name}, cm)
		if apierrors.IsNotFound(err) {
			if basisKnown {
				return true, nil
			}
			continue
		}
		if err != nil {
			return false, fmt.Errorf("get configmap %s/%s metadata: %w", namespace, src.Name, err)
		}
		if stamp.IsTrue(cm.Annotations[stamp.IgnoreAnnotation]) {
			continue
		}
		if !lastWrite(cm).Before(since) {
			return true, nil
		}
	}
	return false, nil
}

// bypassed reports whether the Deployment was created while the registration already
// sent its namespace's admissions to configstamp, so it should have been stamped at
// creation: created after the registration and after its namespace's last write (the
// opt-in label). A Deployment that predates either is one configstamp was installed
// over.
func (e *evidence) bypassed(ctx context.Context, dep *appsv1.Deployment) (bool, error) {
	reg, err := e.registrationCreated(ctx)
	if err != nil || reg.IsZero() {
		return false, err
	}
	ns, err := namespaceMeta(ctx, e.cache, dep.Namespace)
	if err != nil || ns == nil {
		return false, err
	}
	// The times have one-second resolution. A tie with the registration counts as
	// predating: a Deployment created as configstamp was being installed was admitted
	// without a stamp, and its new pods read the config as it was then. A tie with the
	// namespace's last write counts as after: a namespace is written when it is
	// created, often with its label, just before its Deployments.
	created := dep.CreationTimestamp.Time
	return created.After(reg) && !created.Before(lastWrite(ns)), nil
}

// registrationCreated returns when the registration was created; zero when it does not
// exist (yet).
func (e *evidence) registrationCreated(ctx context.Context) (time.Time, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.registered.IsZero() {
		return e.registered, nil
	}
	var reg admissionregistrationv1.MutatingWebhookConfiguration
	err := e.live.Get(ctx, client.ObjectKey{Name: e.registration}, &reg)
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		// Unknown: every unstamped workload then counts as predating configstamp,
		// which only ever records (never rolls) it.
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("get registration %s: %w", e.registration, err)
	}
	e.registered = reg.CreationTimestamp.Time
	return e.registered, nil
}

// cacheBehind reports whether the watch has not yet seen the latest write of one of the
// sources (its cached resourceVersion differs from a live metadata read's).
func (e *evidence) cacheBehind(ctx context.Context, namespace string, srcs []stamp.Source) (bool, error) {
	for _, src := range srcs {
		key := client.ObjectKey{Namespace: namespace, Name: src.Name}
		live, cached := newConfigMapMeta(), newConfigMapMeta()
		liveErr := e.live.Get(ctx, key, live)
		if liveErr != nil && !apierrors.IsNotFound(liveErr) {
			return false, fmt.Errorf("get configmap %s metadata: %w", key, liveErr)
		}
		cachedErr := e.cache.Get(ctx, key, cached)
		if cachedErr != nil && !apierrors.IsNotFound(cachedErr) {
			return false, fmt.Errorf("get cached configmap %s metadata: %w", key, cachedErr)
		}
		if apierrors.IsNotFound(liveErr) != apierrors.IsNotFound(cachedErr) || live.ResourceVersion != cached.ResourceVersion {
			return true, nil
		}
	}
	return false, nil
}

func newConfigMapMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	return m
}
