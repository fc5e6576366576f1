package watcher

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/internal/decide"
	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// evidence reads, for the decision (decide.Evidence), the times the objects carry (all
// on the API server's clock) that tell whether a workload's pods may run older config
// than the current one, when its pod template cannot say: it has no stamp, or a stamp
// made for another template. When the pods of a template began to be created is per
// kind (workload.Kind.PodsSince).
type evidence struct {
	cache client.Reader // Namespace and source metadata as the watch has it
	live  client.Reader // source metadata
	scope *scope.Scope
	// coverage says since when each kind (and Secrets) has been stamped.
	coverage *coverage
}

// forWorkload is the evidence of one workload, read as the decision asks for it.
func (e *evidence) forWorkload(ctx context.Context, kind *workload.Kind, obj client.Object, refs []stamp.Source) decide.Evidence {
	return workloadEvidence{ctx: ctx, e: e, kind: kind, obj: obj, refs: refs}
}

type workloadEvidence struct {
	ctx  context.Context
	e    *evidence
	kind *workload.Kind
	obj  client.Object
	refs []stamp.Source
}

// Coverage is decide.Covered, with the coverage read from the registration (live) and
// the namespace from the cache. A namespaced install reads no Namespace: the time its
// namespace was first watched (decide.CoverageNamespace) stands for its last write.
func (w workloadEvidence) Coverage() (decide.Coverage, error) {
	name := w.obj.GetNamespace()
	since, err := w.e.coverage.ofAll(w.ctx, w.kind.Resource, decide.CoverageSecrets, decide.CoverageNamespace(name))
	if err != nil {
		return decide.Coverage{}, err
	}
	return decide.Covered(w.obj, w.refs, since[0], since[1], func() (metav1.Object, bool, error) {
		if w.e.scope.Namespaced() {
			if !w.e.scope.Includes(name, nil) {
				return nil, false, nil
			}
			return decide.WatchedNamespace(name, since[2])
		}
		ns, in, err := namespaceIn(w.ctx, w.e.cache, w.e.scope, name)
		if err != nil || ns == nil {
			return nil, false, err
		}
		return ns, in, nil
	})
}

// PodsSince lists the workload's ReplicaSets or ControllerRevisions live.
func (w workloadEvidence) PodsSince() (time.Time, bool, error) {
	return w.kind.PodsSince(w.ctx, w.e.live, w.obj)
}

// ConfigNewer reads the sources' metadata live: a cached time could lag behind the
// content the decision was computed from.
func (w workloadEvidence) ConfigNewer(since time.Time) (bool, error) {
	namespace := w.obj.GetNamespace()
	writes, err := decide.Written(w.refs, w.kind.Template(w.obj).Annotations[stamp.SourcesAnnotation], since, false, func(src stamp.Source) (metav1.Object, error) {
		cm := configread.NewMeta(src.Kind)
		err := w.e.live.Get(w.ctx, client.ObjectKey{Namespace: namespace, Name: src.Name}, cm)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("get %s %s/%s metadata: %w", src.Kind, namespace, src.Name, err)
		}
		return cm, nil
	})
	return writes.Newer, err
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
