package workload

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
)

// Cached is a workload as the watcher's cache keeps it (Kind.Compact): its trimmed
// metadata, its trimmed pod template's annotations, and the few fields of its spec and
// status the kind's functions read, precomputed from the whole object. A typed object
// (appsv1.Deployment is a 1,232-byte struct before any content) costs several times
// more per workload. The kind's methods read a Cached as they read a whole object of
// the kind; nothing else may type-assert it. controller-runtime's cache reader refuses
// it for a typed Get or List (the type differs): it is read from the informer's store
// (the watcher's workload store).
type Cached struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	// TemplateAnnotations are those of the trimmed pod template (Trim) but the
	// cache-only ones and those of stampedKeys (nil when none).
	TemplateAnnotations map[string]string
	// The trimmed template's cache-only annotations, as fields: a map entry costs more.
	Fingerprint, PodsDigest, References, Selector string
	// stamped holds the template annotations of stampedKeys (present: the bit i of
	// hasStamped), so that most templates need no map at all.
	stamped    [len(stampedKeys)]string
	hasStamped uint8
	// ObservedGeneration is the generation the kind's controller has seen (status).
	ObservedGeneration int64
	// UpdateRevision names the ControllerRevision of the current template (a
	// StatefulSet's status.updateRevision).
	UpdateRevision string
	// Paused is Kind.Paused of the whole object.
	Paused bool
	// Behind, Total and Partial are Kind.Behind of the whole object.
	Behind, Total int32
	Partial       bool
	// Health is Kind.Health of the whole object.
	Health Health
}

var _ client.Object = &Cached{}

// stampedKeys are the template annotations nearly every stamped workload's trimmed
// template carries, kept as fields of a Cached.
var stampedKeys = [...]string{stamp.HashAnnotation, stamp.SourcesAnnotation, paddingAnnotation}

// DeepCopyObject copies c; its maps are copied, its other metadata shared as
// ObjectMeta.DeepCopyInto does.
func (c *Cached) DeepCopyObject() runtime.Object {
	if c == nil {
		return nil
	}
	out := *c
	c.DeepCopyInto(&out.ObjectMeta)
	out.TemplateAnnotations = maps.Clone(c.TemplateAnnotations)
	return &out
}

// cachedOf is obj as a Cached, when it is one.
func cachedOf(obj client.Object) (*Cached, bool) {
	c, ok := obj.(*Cached)
	return c, ok && c != nil
}

// templateOf is the kind's template of obj, a trimmed one (annotations only) of a
// Cached. A Cached is made only by Compact, from a typed object whose cache-only keys
// it dropped: its fields are configstamp's, and the template carries this process's
// trimToken.
func (k *Kind) templateOf(obj client.Object) *corev1.PodTemplateSpec {
	if c, ok := cachedOf(obj); ok {
		ann := make(map[string]string, len(c.TemplateAnnotations)+5+len(stampedKeys))
		maps.Copy(ann, c.TemplateAnnotations)
		for i, key := range stampedKeys {
			if c.hasStamped&(1<<i) != 0 {
				ann[key] = c.stamped[i]
			}
		}
		for k, v := range map[string]string{FingerprintAnnotation: c.Fingerprint, podsDigestAnnotation: c.PodsDigest,
			referencesAnnotation: c.References, selectorAnnotation: c.Selector} {
			if v != "" {
				ann[k] = v
			}
		}
		ann[trimmedAnnotation] = trimToken
		return &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: ann}}
	}
	return k.template(obj)
}

// Compacts reports whether Compact makes a Cached of the kind's workloads.
func (k *Kind) Compacts() bool { return k.compact }

// Compact is Trim's result as a Cached for the kinds that have one (Compacts), Trim's
// otherwise; keepLabels as Trim's. A Cached is returned as it is. Every field of the
// kind's functions read of the whole object (Paused, Behind, Health, ...) is
// precomputed here.
func (k *Kind) Compact(obj client.Object, keepLabels ...string) client.Object {
	if !k.compact || obj == nil {
		return k.Trim(obj, keepLabels...)
	}
	if _, ok := cachedOf(obj); ok {
		return obj
	}
	t := k.template(obj)
	if t == nil { // not of the kind
		return obj
	}
	tmpl := k.trimTemplate(t)
	if sel := k.selectorOrNil(obj); sel != nil {
		if b, err := sel.Marshal(); err == nil { // a typed LabelSelector always encodes
			tmpl.Annotations[selectorAnnotation] = string(b)
		}
	}
	ann := tmpl.Annotations
	c := &Cached{ObjectMeta: trimMeta(obj, keepLabels), Paused: k.Paused(obj), Health: k.Health(obj), Fingerprint: ann[FingerprintAnnotation],
		PodsDigest: ann[podsDigestAnnotation], References: ann[referencesAnnotation], Selector: ann[selectorAnnotation]}
	for _, key := range []string{trimmedAnnotation, FingerprintAnnotation, podsDigestAnnotation, referencesAnnotation, selectorAnnotation} {
		delete(ann, key)
	}
	for i, key := range stampedKeys {
		if v, ok := ann[key]; ok {
			c.stamped[i], c.hasStamped = v, c.hasStamped|1<<i
			delete(ann, key)
		}
	}
	if len(ann) > 0 {
		c.TemplateAnnotations = make(map[string]string, len(ann)) // a map keeps the room it grew to
		maps.Copy(c.TemplateAnnotations, ann)
	}
	c.APIVersion, c.Kind = k.GVK().GroupVersion().String(), k.Kind
	if k.observed != nil {
		c.ObservedGeneration = k.observed(obj)
	}
	if k.revision != nil {
		c.UpdateRevision = k.revision(obj)
	}
	c.Behind, c.Total, c.Partial = k.Behind(obj)
	return c
}
