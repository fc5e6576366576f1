package waves

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// NamespaceProblem prefixes the problems Resolve finds in the namespace's annotations.
const NamespaceProblem = "namespace: "

// Resolve is a source's settings, each level over the one before: the cluster's (flags),
// the namespace's label (on/off), the namespace's annotations (Annotation,
// ThresholdAnnotation, DeadlineAnnotation: the source's syntax and bounds; its waves
// annotation wins over its label), the source's annotations. problems are the bad values
// of the namespace's annotations ("namespace: ...") and the source's: each is kept out
// and the level before applies.
func Resolve(cluster Settings, nsLabels, nsAnnotations, annotations map[string]string) (Settings, []string) {
	s := cluster
	if v, ok := nsLabels[Annotation]; ok {
		s, _ = ForSource(s, map[string]string{Annotation: v})
	}
	s, nsProblems := ForSource(s, nsAnnotations)
	for i, p := range nsProblems {
		nsProblems[i] = NamespaceProblem + p
	}
	s, problems := ForSource(s, annotations)
	return s, append(nsProblems, problems...)
}

// ChangeOf names the change of a source by its whole content under the namespace's
// key: "configmap/shared=3f2a1c9e0b7d" (what Events, records and commands name).
func ChangeOf(kind, name string, content *corev1.ConfigMap, nsKey []byte) string {
	whole := stamp.SourceDigest(stamp.Source{Kind: kind, Name: name, AllKeys: true, Binary: true}, content, nsKey)
	return kind + "/" + name + "=" + whole.Hex()[:12]
}

// MemberID names a workload of kind in a plan: "deployment/a".
func MemberID(kind *workload.Kind, name string) string {
	return strings.ToLower(kind.Kind) + "/" + name
}

// Consumer is a workload that refers to the source, as its reader found it.
type Consumer struct {
	Kind   *workload.Kind
	Object client.Object
	// InScope: the registration sends its admissions (scope.IncludesWorkload).
	InScope bool
	// Canary: it carries CanaryLabel=true (IsCanary).
	Canary bool
}

// IsCanary reports whether the workload o carries CanaryLabel=true.
func IsCanary(o client.Object) bool { return o.GetLabels()[CanaryLabel] == "true" }

// Members are the consumers of source kind/name the watcher rolls, for the change of
// its content. Rolled: a template's digest of it is the current content's for what that
// workload consumes of it; a template with no digest of it (a workload adopted
// unstamped) has Rolled only once the watcher recorded it current for the change
// (RolledAnnotation: nothing it reads changed). Judged (its health counts) where the
// watcher's nudge rolled it on this change (a record dated before the workload was
// created is not); a rolled member not judged is Ready. Failed
// and Resumed from its FailedAnnotation. Those it never rolls (no template, being
// deleted, opted out, paused, out of scope) are not members: a wave waiting for them
// would wait for ever. nsKey nil (a reader without the hash key): Rolled is not known,
// and false.
func Members(kind, name string, content *corev1.ConfigMap, nsKey []byte, change string, opts stamp.Options, consumers []Consumer) []Member {
	var out []Member
	for _, c := range consumers {
		o := c.Object
		tmpl := c.Kind.Template(o)
		if tmpl == nil || o.GetDeletionTimestamp() != nil || stamp.IsTrue(o.GetAnnotations()[stamp.SkipAnnotation]) ||
			c.Kind.Paused(o) || !c.InScope {
			continue
		}
		m := Member{ID: MemberID(c.Kind, o.GetName()), Canary: c.Canary}
		entry, recorded := RolledFor(o.GetAnnotations(), change)
		if recorded && entry.Wave > 0 && entry.At.Before(o.GetCreationTimestamp().Time) {
			// Dated before the workload was created: a record copied with its manifest
			// onto a workload created again under its name, not a nudge of this one.
			recorded = false
		}
		for _, src := range stamp.Consumed(o.GetAnnotations(), &tmpl.Spec, opts) {
			if src.Kind == kind && src.Name == name && nsKey != nil {
				m.Digest = stamp.SourceDigest(src, content, nsKey).Hex()[:12]
				if stored, ok := stamp.ParseSources(tmpl.Annotations[stamp.SourcesAnnotation])[src.ID()]; ok {
					m.Rolled = stored == m.Digest
				} else {
					m.Rolled = recorded
				}
			}
		}
		m.Judged = m.Rolled && recorded && entry.Wave > 0
		if m.Judged {
			m.Since = entry.At
		}
		m.Ready = m.Rolled && !m.Judged
		m.Failed, m.Resumed = ParseFailed(o.GetAnnotations()[FailedAnnotation], change)
		out = append(out, m)
	}
	return out
}

// RolledFor is the RolledAnnotation entry of change in a workload's annotations.
func RolledFor(annotations map[string]string, change string) (RolledEntry, bool) {
	for _, e := range ParseRolled(annotations[RolledAnnotation]) {
		if e.Change == change {
			return e, true
		}
	}
	return RolledEntry{}, false
}

// FailedHealth is Member.Failed for a rolled member whose health failed (why).
func FailedHealth(why string) string { return "did not become available: " + why }

// Hold says what the verdict of change means for the member in wave, for source src
// ("configmap/shared"): held "" when it may roll now (note then names its wave), else
// "halted: ..." or "held: waiting for wave N of M for ...".
func (v Verdict) Hold(wave int, src, change string) (held, note string) {
	if v.May(wave) {
		return "", fmt.Sprintf("wave %d of %d for %s", wave, v.Waves, src)
	}
	if v.Halted != "" {
		return fmt.Sprintf("halted: %s (change %s)", v.Halted, change), ""
	}
	return fmt.Sprintf("held: waiting for wave %d of %d for %s (wave %d rolling: %s)", wave, v.Waves, src,
		v.Current, strings.Join(v.Waiting, ", ")), ""
}
