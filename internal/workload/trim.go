package workload

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
)

// Annotations only a trimmed pod template carries (Trim); configstamp never writes them.
// Their keys, with a space, are not valid annotation keys, but the API server checks
// them only where it validates a pod template: not inside a custom resource (a
// Rollout's template), nor before the webhook (mutating admission comes before
// validation). So they are trusted only in a template carrying trimmedAnnotation with
// this process's trimToken, and Trim drops them from any other.
const (
	// trimmedAnnotation marks a template Trim made: its value is trimToken.
	trimmedAnnotation = "cache.configstamp.io/trimmed"
	// FingerprintAnnotation holds stamp.TemplateFingerprint of the whole template.
	FingerprintAnnotation = "cache.configstamp.io/template fingerprint"
	// podsDigestAnnotation holds podsDigest of the whole template (kinds whose current
	// ReplicaSet is told by its template).
	podsDigestAnnotation = "cache.configstamp.io/pods digest"
	// paddingAnnotation stands for the annotations Trim drops: as long as they were
	// together, so that size checks (stamp.AnnotationsFit) give the same answers.
	paddingAnnotation = "cache.configstamp.io/dropped annotations"
	// referencesAnnotation holds the template's references to sources
	// (stamp.ReferencesOnly) as their protobuf encoding: a few hundred bytes of string
	// where the decoded containers and volumes took kilobytes of heap per workload.
	// Template gives them back decoded, without this annotation (nor its size).
	referencesAnnotation = "cache.configstamp.io/references"
	// selectorAnnotation holds the workload's selector, protobuf-encoded, in its trimmed
	// template (the decoded map took about 560 bytes of heap per workload); read by
	// selectorOf, hidden by Template.
	selectorAnnotation = "cache.configstamp.io/selector"
)

// trimToken is random per process: no object from the API server can carry it.
var trimToken = rand.Text()

// trimmed reports whether t is a template Trim made (its cache-only annotations are
// configstamp's own).
func trimmed(t *corev1.PodTemplateSpec) bool {
	return t != nil && t.Annotations[trimmedAnnotation] == trimToken
}

// padding backs every paddingAnnotation value: a slice of it costs no memory.
var padding = strings.Repeat("-", stamp.AnnotationSizeLimit)

// Trim returns obj reduced to what configstamp reads of a workload of the kind, for the
// watcher's cache: its identity, generation, times (creation, deletion, managedFields),
// the labels keepLabels (the opt-in one, the canary one), configstamp's annotations (and
// kubernetes.io/change-cause), and the kind's fields its table reads (selector, paused,
// what Health reads); of its pod template,
// configstamp's annotations and the references to sources (stamp.ReferencesOnly,
// encoded), with the template's fingerprints in cache-only annotations. Dropped annotations are
// replaced by one padding annotation of their size. obj is not changed; obj itself is
// returned when it is not of the kind. A trimmed object is left as it is (informers may
// pass an object of the cache through the transform again). Readers of a trimmed
// template take it with Template (which decodes the references) and its fingerprint
// with TemplateFingerprint.
func (k *Kind) Trim(obj client.Object, keepLabels ...string) client.Object {
	if k.reduce == nil || obj == nil {
		return obj
	}
	var tmpl *corev1.PodTemplateSpec
	sel := k.selectorOrNil(obj)
	if t := k.template(obj); t != nil {
		tmpl = k.trimTemplate(t)
		if sel != nil {
			if b, err := sel.Marshal(); err == nil { // a typed LabelSelector always encodes
				tmpl.Annotations[selectorAnnotation], sel = string(b), nil
			}
		}
	}
	return k.reduce(obj, trimMeta(obj, keepLabels), tmpl, sel)
}

// selectorOrNil is obj's own selector field (nil for kinds without one).
func (k *Kind) selectorOrNil(obj client.Object) *metav1.LabelSelector {
	if _, ok := cachedOf(obj); ok || k.selector == nil {
		return nil
	}
	return k.selector(obj)
}

// selectorOf is obj's selector, also when obj is trimmed (Trim keeps it encoded in its
// template).
func (k *Kind) selectorOf(obj client.Object) *metav1.LabelSelector {
	if t := k.templateOf(obj); trimmed(t) {
		if enc, ok := t.Annotations[selectorAnnotation]; ok {
			sel := &metav1.LabelSelector{}
			if err := sel.Unmarshal([]byte(enc)); err == nil { // never fails: Trim encoded it
				return sel
			}
		}
	}
	return k.selectorOrNil(obj)
}

// trimMeta is the object metadata Trim keeps.
func trimMeta(obj client.Object, keepLabels []string) metav1.ObjectMeta {
	m := metav1.ObjectMeta{
		Name: obj.GetName(), Namespace: obj.GetNamespace(), UID: obj.GetUID(), ResourceVersion: obj.GetResourceVersion(),
		Generation: obj.GetGeneration(), CreationTimestamp: obj.GetCreationTimestamp(), DeletionTimestamp: obj.GetDeletionTimestamp(),
		ManagedFields: obj.GetManagedFields(),
	}
	if _, ok := obj.GetAnnotations()[paddingAnnotation]; ok {
		// Trimmed already: the API server validates every object's own annotation keys.
		m.Annotations = maps.Clone(obj.GetAnnotations())
	} else {
		m.Annotations = trimAnnotations(obj.GetAnnotations(), nil)
	}
	for _, l := range keepLabels {
		if v, ok := obj.GetLabels()[l]; ok {
			if m.Labels == nil {
				m.Labels = map[string]string{}
			}
			m.Labels[l] = v
		}
	}
	return m
}

// trimTemplate is the pod template Trim keeps.
func (k *Kind) trimTemplate(t *corev1.PodTemplateSpec) *corev1.PodTemplateSpec {
	if trimmed(t) {
		// Informers may pass an object of the cache through the transform again: its
		// encoded references are kept, not taken again from its trimmed spec.
		return t.DeepCopy()
	}
	// Cache-only keys on a whole template are someone else's: dropped (padded) below.
	cached := map[string]string{trimmedAnnotation: trimToken, FingerprintAnnotation: stamp.TemplateFingerprint(t)}
	if k.digested() {
		cached[podsDigestAnnotation] = podsDigest(t, k.hashLabel)
	}
	ann := trimAnnotations(t.Annotations, cached)
	if refs := stamp.ReferencesOnly(&t.Spec); len(refs.Containers) > 0 || len(refs.Volumes) > 0 {
		if b, err := refs.Marshal(); err == nil { // a typed PodSpec always encodes
			ann[referencesAnnotation] = string(b)
		}
	}
	return &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: ann}}
}

// expanded is the trimmed template t as its readers take it: its references decoded
// into its spec, its annotations without the encoded references and selector. t is not changed; the new
// template shares nothing written to with it but its metadata's other maps (read-only,
// as the cache's objects are).
func expanded(t *corev1.PodTemplateSpec) *corev1.PodTemplateSpec {
	if !trimmed(t) {
		return t // a whole template: cache-only keys in it are not configstamp's
	}
	enc, refs := t.Annotations[referencesAnnotation]
	if _, sel := t.Annotations[selectorAnnotation]; !refs && !sel {
		return t
	}
	out := &corev1.PodTemplateSpec{ObjectMeta: t.ObjectMeta}
	out.Annotations = maps.Clone(t.Annotations)
	delete(out.Annotations, referencesAnnotation)
	delete(out.Annotations, selectorAnnotation)
	if !refs {
		return out
	}
	if err := out.Spec.Unmarshal([]byte(enc)); err != nil {
		// Never: Trim encoded it (trimmed). Taken as no references.
		out.Spec = corev1.PodSpec{}
	}
	return out
}

// digested reports whether the kind tells its current ReplicaSet by its template
// (sameTemplate).
func (k *Kind) digested() bool { return k.hashLabel != "" && k.currentHash == nil }

// trimAnnotations keeps configstamp's annotations (but the keys annotation, which only
// the webhook reads) and the change cause of ann, adds cached, and pads for the size of
// the rest (nil when nothing is left).
func trimAnnotations(ann, cached map[string]string) map[string]string {
	out := map[string]string{}
	dropped := 0
	for k, v := range ann {
		if strings.HasPrefix(k, "configstamp.io/") && k != stamp.KeysAnnotation || k == stamp.ChangeCauseAnnotation {
			out[k] = v
		} else {
			dropped += len(k) + len(v)
		}
	}
	for k, v := range cached {
		out[k] = v
		dropped -= len(k) + len(v)
	}
	if dropped > 0 {
		// Never less than what was dropped: a size check errs on the side of too large
		// (by at most the padding key, or the cached annotations when more).
		out[paddingAnnotation] = padding[:min(max(dropped-len(paddingAnnotation), 0), len(padding))]
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// TemplateFingerprint is stamp.TemplateFingerprint of the whole template t, also when t
// is a trimmed one (Trim).
func TemplateFingerprint(t *corev1.PodTemplateSpec) string {
	if fp, ok := t.Annotations[FingerprintAnnotation]; ok && trimmed(t) {
		return fp
	}
	return stamp.TemplateFingerprint(t)
}

// podsDigest identifies a pod template, configstamp's annotations included, apart from
// the label label (the one the kind's controller adds to its ReplicaSets' templates).
// Its protobuf encoding (deterministic: map keys sorted) tells no nil list or map from
// an empty one, as the kind's controller (semantic equality) does not; JSON does, and
// the two templates need not come alike (one stored as written, one made by the
// controller from a protobuf read).
func podsDigest(t *corev1.PodTemplateSpec, label string) string {
	c := t.DeepCopy()
	delete(c.Labels, label)
	b, err := c.Marshal()
	if err != nil { // a typed PodTemplateSpec always encodes
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
