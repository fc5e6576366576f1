package stamp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// Observed is the evidence configstamp keeps, in a workload's metadata, of the config its
// pods run when the pod template does not say (a workload that predates configstamp, or
// one whose template changed while the webhook was bypassed): the config hash, and a
// fingerprint of the template it was recorded for. It is valid only while the template
// is the one it was recorded for: a new template means new pods.
type Observed struct {
	Hash     string
	Template string
	// Secrets is true when the hash covers Secrets: written only for a workload that
	// consumes one while Secrets count (HasSecrets). A record whose flag differs from
	// HasSecrets of the workload's sources now was made while Secrets counted
	// differently: it is not a certain basis (turning Secrets on or off is judged like
	// an install, by evidence, and rolls nothing by itself).
	Secrets bool
	// Key is the KeyFingerprint of the key the hash was computed under; "" in a record
	// made before records carried it (unknown key).
	Key string
	// Behind is the config hash pods of older templates still run ("": none): a
	// workload whose controller replaces pods only on their deletion or below a
	// partition (decide.RecordBehind) keeps them after a new template; Hash is what
	// the current template's pods run.
	Behind string
}

// String renders the annotation value, "<config hash> template=<fingerprint>", with
// " secrets" when the hash covers Secrets, " key=<key fingerprint>" and
// " behind=<config hash>" at the end.
func (o Observed) String() string {
	s := o.Hash + " template=" + o.Template
	if o.Secrets {
		s += " secrets"
	}
	if o.Key != "" {
		s += " key=" + o.Key
	}
	if o.Behind != "" {
		s += " behind=" + o.Behind
	}
	return s
}

// ParseObserved reads an ObservedAnnotation value; ok is false when it is malformed.
// A record without " key=" (an older version's) parses with Key "".
func ParseObserved(v string) (o Observed, ok bool) {
	hash, rest, found := strings.Cut(v, " template=")
	if !found || !isConfigHash(hash) || rest == "" {
		return Observed{}, false
	}
	fields := strings.Split(rest, " ")
	o = Observed{Hash: hash, Template: fields[0]}
	if o.Template == "" {
		return Observed{}, false
	}
	fields = fields[1:]
	if len(fields) > 0 && fields[0] == "secrets" {
		o.Secrets, fields = true, fields[1:]
	}
	if len(fields) > 0 && !strings.HasPrefix(fields[0], "behind=") {
		key, isKey := strings.CutPrefix(fields[0], "key=")
		if !isKey || !IsKeyFingerprint(key) {
			return Observed{}, false
		}
		o.Key, fields = key, fields[1:]
	}
	if len(fields) > 0 {
		behind, isBehind := strings.CutPrefix(fields[0], "behind=")
		if !isBehind || !isConfigHash(behind) {
			return Observed{}, false
		}
		o.Behind, fields = behind, fields[1:]
	}
	if len(fields) > 0 {
		return Observed{}, false
	}
	return o, true
}

// isConfigHash reports whether s is a config hash as configstamp writes it: lower-case
// hex SHA-256. Anything else in a record (written by hand while the webhook was
// bypassed) makes it invalid, so no other value reaches a decision or explain's output.
func isConfigHash(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// HasSecrets reports whether any of srcs is a Secret: the Secrets flag a record of them
// carries.
func HasSecrets(srcs []Source) bool {
	for _, s := range srcs {
		if s.Kind == KindSecret {
			return true
		}
	}
	return false
}

// Certain reports whether the record is a certain basis for a workload whose sources
// are srcs: made while Secrets counted as they do now.
func (o Observed) Certain(srcs []Source) bool { return o.Secrets == HasSecrets(srcs) }

// ObservedFor returns the record in annotations that is valid for template, if any.
func ObservedFor(annotations map[string]string, template *corev1.PodTemplateSpec) (Observed, bool) {
	return ObservedWith(annotations, TemplateFingerprint(template))
}

// ObservedWith returns the record in annotations that is valid for the template whose
// TemplateFingerprint is fingerprint, if any.
func ObservedWith(annotations map[string]string, fingerprint string) (Observed, bool) {
	o, ok := ParseObserved(annotations[ObservedAnnotation])
	if !ok || o.Template != fingerprint {
		return Observed{}, false
	}
	return o, true
}

// fingerprintChars is how many hex characters of the template digest a record keeps.
const fingerprintChars = 16

// TemplateFingerprint identifies a pod template apart from configstamp's own annotations
// (the stamp, and the restart annotation): two templates that differ only in those run
// the same pods' spec. It hashes the JSON
// encoding of the typed template (map keys sorted), so the webhook and the watcher agree.
func TemplateFingerprint(t *corev1.PodTemplateSpec) string {
	c := WithoutStamp(t)
	b, err := json.Marshal(c)
	if err != nil { // a typed PodTemplateSpec always encodes
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:fingerprintChars]
}

// SameTemplate reports whether two pod templates are the same apart from configstamp's
// annotations: the webhook and the watcher both tell a template change by it.
func SameTemplate(a, b *corev1.PodTemplateSpec) bool {
	return equality.Semantic.DeepEqual(WithoutStamp(a), WithoutStamp(b))
}

// WithoutStamp returns a copy of t without configstamp's annotations.
func WithoutStamp(t *corev1.PodTemplateSpec) *corev1.PodTemplateSpec {
	c := t.DeepCopy()
	delete(c.Annotations, HashAnnotation)
	delete(c.Annotations, SourcesAnnotation)
	delete(c.Annotations, RestartedAnnotation)
	if len(c.Annotations) == 0 {
		c.Annotations = nil
	}
	return c
}
