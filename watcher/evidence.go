package watcher

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// evidence answers, from the times the objects carry (all on the API server's clock),
// whether a workload's pods may run older config than the current one, when its pod
// template cannot say: it has no stamp, or a stamp made for another template. When the
// pods of a template began to be created is per kind (workload.Kind.PodsSince).
type evidence struct {
	cache client.Reader // Namespace and source metadata as the watch has it
	live  client.Reader // source metadata
	scope *scope.Scope
	// coverage says since when each kind (and Secrets) has been stamped.
	coverage *coverage
}

// configNewer reports whether a source was written at or after since (the API server's
// times have one-second resolution: a tie counts as newer, so a change is never lost).
// A source that is missing now counts as newer only when the stored stamp's sources
// annotation (storedSources) shows it present: it was deleted since (a deletion carries
// no time). A source the stored stamp did not count (Secrets were off) or saw missing
// too gives no evidence. It reads metadata live: a cached time could lag behind the
// content the decision was computed from.
func (e *evidence) configNewer(ctx context.Context, namespace string, srcs []stamp.Source, since time.Time, storedSources string) (bool, error) {
	stored := stamp.ParseSources(storedSources)
	for _, src := range srcs {
		cm := configread.NewMeta(src.Kind)
		err := e.live.Get(ctx, client.ObjectKey{Namespace: namespace, Name: src.Name}, cm)
		if apierrors.IsNotFound(err) {
			if d, ok := stored[src.ID()]; ok && d != "missing" {
				return true, nil
			}
			continue
		}
		if err != nil {
			return false, fmt.Errorf("get %s %s/%s metadata: %w", src.Kind, namespace, src.Name, err)
		}
		if stamp.IsTrue(cm.Annotations[stamp.IgnoreAnnotation]) {
			continue
		}
		if !workload.LastWrite(cm).Before(since) {
			return true, nil
		}
	}
	return false, nil
}

// bypassed reports whether the workload was created while the registration already
// sent its admissions to configstamp, so it should have been stamped at creation:
// created after configstamp began to cover its kind (and Secrets, when it consumes one)
// and after its namespace's last write (the opt-in label). A workload that predates
// either is one configstamp was installed over. A workload opted in by its own label
// alone never counts: nothing tells when the label was added, so it is taken as
// installed over (recorded, not rolled).
func (e *evidence) bypassed(ctx context.Context, kind *workload.Kind, obj client.Object, refs []stamp.Source) (bool, error) {
	covered, err := e.coverage.of(ctx, kind.Resource)
	if err != nil || covered.IsZero() {
		return false, err
	}
	if stamp.HasSecrets(refs) {
		secrets, err := e.coverage.of(ctx, coverageSecrets)
		if err != nil || secrets.IsZero() {
			return false, err
		}
		covered = later(covered, secrets)
	}
	ns, err := namespaceMeta(ctx, e.cache, obj.GetNamespace())
	if err != nil || ns == nil || !e.scope.Includes(ns.Name, ns.Labels) {
		return false, err
	}
	// The times have one-second resolution. A tie with the coverage counts as
	// predating: a workload created as configstamp was being installed was admitted
	// without a stamp, and its new pods read the config as it was then. A tie with the
	// namespace's last write counts as after: a namespace is written when it is
	// created, often with its label, just before its workloads.
	created := obj.GetCreationTimestamp().Time
	return created.After(covered) && !created.Before(workload.LastWrite(ns)), nil
}

// cacheBehind reports whether the watch has not yet seen the latest write of one of the
// sources (its cached resourceVersion differs from a live metadata read's).
func (e *evidence) cacheBehind(ctx context.Context, namespace string, srcs []stamp.Source) (bool, error) {
	for _, src := range srcs {
		key := client.ObjectKey{Namespace: namespace, Name: src.Name}
		live, cached := configread.NewMeta(src.Kind), configread.NewMeta(src.Kind)
		liveErr := e.live.Get(ctx, key, live)
		if liveErr != nil && !apierrors.IsNotFound(liveErr) {
			return false, fmt.Errorf("get %s %s metadata: %w", src.Kind, key, liveErr)
		}
		cachedErr := e.cache.Get(ctx, key, cached)
		if cachedErr != nil && !apierrors.IsNotFound(cachedErr) {
			return false, fmt.Errorf("get cached %s %s metadata: %w", src.Kind, key, cachedErr)
		}
		if apierrors.IsNotFound(liveErr) != apierrors.IsNotFound(cachedErr) || live.ResourceVersion != cached.ResourceVersion {
			return true, nil
		}
	}
	return false, nil
}
