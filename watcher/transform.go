package watcher

import (
	"maps"
	"reflect"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/waves"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// LatestWriteManager names the one managedFields entry TrimForCache keeps. It carries
// only the time of the object's latest write: no fields, no operation.
const LatestWriteManager = "configstamp-latest-write"

// TrimForCache returns the informer caches' transform. An object written by client-side
// `kubectl apply` or Argo CD carries a second copy of itself in the
// last-applied-configuration annotation (for a ConfigMap, its whole content, even in a
// metadata-only watch), and managedFields that name every key; both would make the
// caches grow with config size. The transform removes the annotation and reduces
// managedFields to one entry holding the latest write time, the only part of them
// configstamp reads (lastWrite). Of a ConfigMap's or a Secret's metadata, it keeps no
// labels and no annotation but configstamp.io/ignore and the waves ones
// (keptOfSource): other tools keep copies of the object in annotations too. Of a Flux
// HelmRelease, only the metadata, spec.valuesFrom and spec.suspend (trimHelmRelease).
// Of a CSI pod status, what the watcher reads of it (trimPodStatus).
// Everything else is kept.
//
// It is idempotent (informers may pass an object through it twice) and writes to an
// object only when something is to be removed, so an object already in the cache, as in
// a tombstone, is never written to. Values without object metadata pass through.
func TrimForCache() toolscache.TransformFunc {
	return func(in any) (any, error) {
		if tomb, ok := in.(toolscache.DeletedFinalStateUnknown); ok {
			trim(tomb.Obj)
			return tomb, nil
		}
		if hr, ok := in.(*helmv2.HelmRelease); ok && hr != nil {
			in = trimHelmRelease(hr)
		}
		if u, ok := in.(*unstructured.Unstructured); ok && u != nil && podStatus(u) {
			in = trimPodStatus(u)
		}
		trim(in)
		return in, nil
	}
}

// trimHelmRelease is hr as the cache keeps it: its metadata and, of its spec, what the
// watcher reads (valuesFrom, suspend). Its inline values (often credentials, at times
// megabytes), chart and status (with its release history) are not kept. hr itself when
// it holds nothing more (as one already trimmed), else a new object: hr is not written.
func trimHelmRelease(hr *helmv2.HelmRelease) *helmv2.HelmRelease {
	kept := helmv2.HelmReleaseSpec{ValuesFrom: hr.Spec.ValuesFrom, Suspend: hr.Spec.Suspend}
	if reflect.DeepEqual(hr.Spec, kept) && reflect.DeepEqual(hr.Status, helmv2.HelmReleaseStatus{}) {
		return hr
	}
	return &helmv2.HelmRelease{TypeMeta: hr.TypeMeta, ObjectMeta: hr.ObjectMeta, Spec: kept}
}

// TrimWorkloads returns the transform of the informer of kind's workloads: each is
// reduced to what the watcher reads of it (workload.Kind.Trim, keeping the opt-in label
// keepLabel and waves.CanaryLabel), its managedFields to the latest write time. A pod template then costs the
// cache its references to sources, not its containers, probes, resources and labels.
// The watcher's live reads and the API server's answers to its writes are trimmed alike.
// Tombstones pass through: they hold an object of the cache, trimmed already; a trimmed
// object passed again is left as it is.
// With compact, kinds that have one keep a workload.Cached (workload.Kind.Compact):
// only for a cache whose informers expose their store (not a namespaced install's), as
// the watcher then reads them from it (workloadStore).
func TrimWorkloads(kind *workload.Kind, keepLabel string, compact bool) toolscache.TransformFunc {
	return func(in any) (any, error) {
		obj, ok := in.(client.Object)
		if !ok {
			return in, nil
		}
		if v := reflect.ValueOf(obj); v.Kind() == reflect.Pointer && v.IsNil() {
			return in, nil
		}
		return trimWorkload(kind, keepLabel, obj, compact), nil
	}
}

// trimWorkload is obj as the cache of kind's workloads keeps it.
func trimWorkload(kind *workload.Kind, keepLabel string, obj client.Object, compact bool) client.Object {
	var out client.Object
	if compact {
		out = kind.Compact(obj, keepLabel, waves.CanaryLabel)
	} else {
		out = kind.Trim(obj, keepLabel, waves.CanaryLabel)
	}
	trim(out)
	return out
}

// trim removes the last-applied-configuration annotation and all but the latest write
// time of managedFields from obj, in place.
func trim(obj any) {
	if obj == nil {
		return
	}
	if v := reflect.ValueOf(obj); v.Kind() == reflect.Pointer && v.IsNil() {
		return
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	if sourceMeta(obj) {
		// A ConfigMap's or Secret's metadata: configstamp reads only its ignore
		// annotation. Other tools keep copies of the whole object, content in clear, in
		// annotations of their own (kapp, for one): none of it is kept.
		ann := m.GetAnnotations()
		if kept := keptOfSource(ann); !maps.Equal(ann, kept) {
			m.SetAnnotations(kept)
		}
		if m.GetLabels() != nil {
			m.SetLabels(nil)
		}
	}
	if ann := m.GetAnnotations(); hasKey(ann, corev1.LastAppliedConfigAnnotation) {
		// A new map: the old one may be shared with the decoder's copy of the object.
		kept := make(map[string]string, len(ann)-1)
		for k, v := range ann {
			if k != corev1.LastAppliedConfigAnnotation {
				kept[k] = v
			}
		}
		if len(kept) == 0 {
			kept = nil
		}
		m.SetAnnotations(kept)
	}
	if mf := m.GetManagedFields(); !trimmed(mf) {
		m.SetManagedFields(latestWrite(mf))
	}
}

// sourceMeta reports whether obj is the metadata of a source kind's object (the watch of
// sources is metadata-only; the cache sets the kind on every object it holds).
func sourceMeta(obj any) bool {
	p, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return false
	}
	gvk := p.GroupVersionKind()
	return stamp.FindSourceKind(gvk.Group, gvk.Kind) != nil
}

// podStatus reports whether u is a source kind's status object (a CSI pod status).
func podStatus(u *unstructured.Unstructured) bool {
	gvk := u.GroupVersionKind()
	return stamp.FindStatusKind(gvk.Group, gvk.Kind) != nil
}

// maxWavesValue bounds the waves annotations the cache keeps of a source: real ones are
// short; a longer one is read live only (waves off costs no live read).
const maxWavesValue = 512

// keptOfSource are the annotations of a source's metadata the cache keeps: its ignore
// annotation and the waves settings (steps, threshold, deadline) and command, up to maxWavesValue bytes each (read
// from the cache: waves off costs no live read). nil when none.
func keptOfSource(ann map[string]string) map[string]string {
	var kept map[string]string
	for k, v := range ann {
		setting := (k == waves.Annotation || k == waves.ThresholdAnnotation || k == waves.DeadlineAnnotation || k == waves.CommandAnnotation) &&
			len(v) <= maxWavesValue
		if k == stamp.IgnoreAnnotation || setting {
			if kept == nil {
				kept = map[string]string{}
			}
			kept[k] = v
		}
	}
	return kept
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// trimmed reports whether managedFields are already in the form latestWrite gives.
func trimmed(mf []metav1.ManagedFieldsEntry) bool {
	switch len(mf) {
	case 0:
		return true
	case 1:
		return reflect.DeepEqual(mf[0], metav1.ManagedFieldsEntry{Manager: LatestWriteManager, Time: mf[0].Time}) && mf[0].Time != nil
	}
	return false
}

// latestWrite is one managedFields entry with the latest time among mf, or none if no
// entry has a time.
func latestWrite(mf []metav1.ManagedFieldsEntry) []metav1.ManagedFieldsEntry {
	var latest *metav1.Time
	for i := range mf {
		if t := mf[i].Time; t != nil && (latest == nil || t.After(latest.Time)) {
			latest = t
		}
	}
	if latest == nil {
		return nil
	}
	return []metav1.ManagedFieldsEntry{{Manager: LatestWriteManager, Time: &metav1.Time{Time: latest.Time}}}
}
