// Package explain answers "why did (or didn't) my workload roll?" from the objects
// configstamp works with: a workload, the sources it consumes as they are now, its
// namespace and its Events. Explain and Impact are pure functions of those objects;
// Gather reads them from a cluster with the code the webhook uses (configread), and
// Offline computes a stamp from manifests. The watcher's decision is mirrored, never
// re-implemented: references come from stamp.Consumed, digests from stamp and
// configread, scope from scope.
package explain

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/decide"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// Verdicts, the stable codes of Report.Verdict.
const (
	// VerdictUpToDate: the pods run the current config; nothing rolls.
	VerdictUpToDate = "up-to-date"
	// VerdictWouldRoll: the config differs from what the pods run; the watcher rolls it.
	VerdictWouldRoll = "would-roll"
	// VerdictHeld: the config differs, but required config is missing: not rolled
	// until it returns.
	VerdictHeld = "held"
	// VerdictNotStamped: the workload predates configstamp (or its stamp was lost):
	// adopted, not rolled.
	VerdictNotStamped = "not-stamped"
	// VerdictSkipped: the workload opts out with configstamp.io/skip.
	VerdictSkipped = "skipped"
	// VerdictNotInScope: neither its namespace nor the workload opts in.
	VerdictNotInScope = "not-in-scope"
	// VerdictNoSources: it consumes no ConfigMap (or, with Secrets, no Secret).
	VerdictNoSources = "no-sources"
	// VerdictNoTemplate: it has no pod template of its own (a Rollout with a
	// workloadRef) or its template does not decode.
	VerdictNoTemplate = "no-template"
	// VerdictUnknown: Secret digests cannot be compared (no hash key) and no ConfigMap
	// changed.
	VerdictUnknown = "unknown"
	// VerdictTooLarge: it would roll, but configstamp's annotations would take its pod
	// template's annotations past the API server's limit: the webhook leaves it
	// unstamped and the watcher leaves it alone (Event StampTooLarge).
	VerdictTooLarge = "too-large"
	// VerdictDependsOnTimes: no certain basis (no valid record), and the times the
	// watcher then decides from could not all be read; Evidence shows those read and
	// Reason what the watcher does with each outcome.
	VerdictDependsOnTimes = "depends-on-times"
	// VerdictDeleting: it is being deleted: configstamp leaves it alone.
	VerdictDeleting = "deleting"
	// VerdictUnknownScope: the namespace could not be read, and the workload does not
	// opt in by its own label: whether it is in scope is not known.
	VerdictUnknownScope = "unknown-scope"
)

// Source statuses, the stable codes of Source.Status.
const (
	StatusUnchanged = "unchanged"
	StatusChanged   = "changed"
	// StatusAdded: consumed now, not in the stamp (a new reference since the stamp).
	StatusAdded = "added"
	// StatusRemoved: in the stamp, no longer consumed.
	StatusRemoved = "removed"
	// StatusIgnored: annotated configstamp.io/ignore=true, left out of the stamp.
	StatusIgnored = "ignored"
	// StatusUnknown: a Secret, without the hash key to compare its digest.
	StatusUnknown = "unknown"
	// StatusNotStamped: the template carries no per-source digests to compare with.
	StatusNotStamped = "not-stamped"
)

// Report is what explain prints; its JSON and YAML forms are documented in README.md
// and kept stable (fields are only ever added).
type Report struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Verdict is one of the Verdict codes; Reason says it in words.
	Verdict string `json:"verdict"`
	Reason  string `json:"reason"`
	// Roll is true when the watcher rolls the workload: after its debounce (the
	// sources quiet) and its minimum interval between rollouts, which are its own
	// state, not shown here.
	Roll bool `json:"roll"`
	// InScope: the namespace or the workload opts in.
	InScope bool `json:"inScope"`
	// Skipped: configstamp.io/skip is "true".
	Skipped bool `json:"skipped"`
	// Stamp is what the pod template carries (the config-hash and sources annotations).
	Stamp StampInfo `json:"stamp"`
	// Record is the hash in configstamp.io/observed when it is valid for the current
	// template ("" otherwise).
	Record string `json:"record,omitempty"`
	// Basis is what the pods are judged to run: "record", "stamp" or "none".
	Basis     string `json:"basis"`
	BasisHash string `json:"basisHash,omitempty"`
	// Current is the stamp of the config as it is now ("" hash: not computable, some
	// Secret digests unknown).
	Current StampInfo `json:"current"`
	// SecretsCompared: Secret digests could be computed (the hash key was read).
	SecretsCompared bool `json:"secretsCompared"`
	// Evidence is the times the watcher decides from when there is no certain basis
	// (no valid record); nil when it has one.
	Evidence *Evidence `json:"evidence,omitempty"`
	Sources  []Source  `json:"sources"`
	// SourcesNote says what the sources' statuses compare with when it is not what
	// the pods run.
	SourcesNote string `json:"sourcesNote,omitempty"`
	// Problems are entries of configstamp.io/extra-sources configstamp ignores.
	Problems []string `json:"problems,omitempty"`
	Events   []Event  `json:"events"`
}

// Evidence is what the watcher decides from without a certain basis: when the pods of
// the current template began to be created (PodsSince), when the config was last
// written (ConfigWritten: a source written at or after PodsSince, or deleted since the
// stamp, rolls), and, for an unstamped workload, whether it was created after
// configstamp covered it (CreatedCovered; nil: not known). Unset times are not known.
type Evidence struct {
	PodsSince      *time.Time `json:"podsSince,omitempty"`
	ConfigWritten  *time.Time `json:"configWritten,omitempty"`
	ConfigDeleted  bool       `json:"configDeleted,omitempty"`
	CreatedCovered *bool      `json:"createdCovered,omitempty"`
	// podsErr is why PodsSince could not be read.
	podsErr string
}

// StampInfo is a config hash and its per-source digests.
type StampInfo struct {
	Hash    string `json:"hash,omitempty"`
	Sources string `json:"sources,omitempty"`
}

// Source is one consumed (or formerly stamped) source.
type Source struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	Use
	// Stamped and Current are the 12-character digests (or "missing") in the stamp and
	// of the content now; "" when not known.
	Stamped string `json:"stamped,omitempty"`
	Current string `json:"current,omitempty"`
	Status  string `json:"status"`
	// Missing: the source does not exist now. Unmet says what required config the
	// pods would lack.
	Missing bool   `json:"missing,omitempty"`
	Unmet   string `json:"unmet,omitempty"`
	// Unconsumed lists the keys it holds that the pods do not see: changing them rolls
	// nothing.
	Unconsumed []string `json:"unconsumed,omitempty"`
	// WrittenSince: written after its pods began to be created (Evidence.PodsSince;
	// when that is not known, after the workload's last write): with an unchanged
	// digest, a change that touched no key the pods see. The times have one-second
	// resolution: a write in the same second as the pods started is not counted.
	WrittenSince bool   `json:"writtenSince,omitempty"`
	Note         string `json:"note,omitempty"`
}

// Use is how a workload consumes a source.
type Use struct {
	// AllKeys: the pods see every key; else Keys lists those they see.
	AllKeys bool     `json:"allKeys"`
	Keys    []string `json:"keys,omitempty"`
	// Via lists how: volume, projected, envFrom, keyRef, extra-sources.
	Via []string `json:"via"`
	// Optional: no reference to it is required (the pods start without it).
	Optional bool `json:"optional"`
}

// use is how a workload whose sources are consumed as how says consumes ref.
func use(ref stamp.Source, how map[string][]string) Use {
	return Use{AllKeys: ref.AllKeys, Keys: ref.Keys, Via: how[ref.ID()], Optional: !ref.Required}
}

// ID is "kind/name".
func (s Source) ID() string { return s.Kind + "/" + s.Name }

// Event is one of configstamp's Events about the workload.
type Event struct {
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Count   int32     `json:"count,omitempty"`
}

// Live is the config as it is now, read by Gather (or built by a test).
type Live struct {
	// Stamp is the stamp of the sources that could be digested (configread); its Hash
	// is the workload's whole stamp only when Complete.
	Stamp stamp.Stamp
	// Complete: every source was digested (no Secret left out for want of the key).
	Complete bool
	// Content holds the ConfigMaps and Secrets read, by "kind/name" (a Secret as
	// stamp.SecretContent gives it); nil for one that does not exist.
	Content map[string]*corev1.ConfigMap
}

// Input is everything Explain decides from.
type Input struct {
	Kind   *workload.Kind
	Object client.Object
	// InScope: scope.IncludesWorkload for the object and its namespace.
	InScope bool
	// NamespaceLabel is the opt-in label (for the reason given when not in scope).
	NamespaceLabel string
	Options        stamp.Options
	Live           Live
	Events         []corev1.Event
	// ScopeUnknown: the namespace could not be read and the workload is not labelled:
	// InScope is not known.
	ScopeUnknown bool
	// RollStale: the server runs with --roll-stale-at-install.
	RollStale bool
	// KindNotCovered: the registration shows configstamp does not cover the kind (a
	// Rollout, without --argo-rollouts).
	KindNotCovered bool
	// Times is read for the watcher's decision without a certain basis; nil: not read.
	Times *Times
}

// Times is what the watcher reads, besides the objects, to decide without a certain
// basis (watcher/evidence.go).
type Times struct {
	// PodsSince, PodsKnown, PodsErr: workload.Kind.PodsSince (PodsKnown false: the
	// controller has not taken the current template in yet).
	PodsSince time.Time
	PodsKnown bool
	PodsErr   string
	// Coverage is the registration's configstamp.io/covered-since (since when each
	// resource, and "secrets", is stamped); nil: the registration could not be read.
	Coverage map[string]time.Time
	// Namespace is the workload's namespace (nil: not readable); NamespaceIncluded:
	// it opts in (scope.Includes).
	Namespace         *corev1.Namespace
	NamespaceIncluded bool
}

// Explain decides, as the watcher would, whether the workload rolls now, and why.
func Explain(in Input) Report {
	obj := in.Object
	r := Report{
		Kind: strings.ToLower(in.Kind.Kind), Namespace: obj.GetNamespace(), Name: obj.GetName(),
		InScope: in.InScope, Skipped: stamp.IsTrue(obj.GetAnnotations()[stamp.SkipAnnotation]),
		Basis: "none", Sources: []Source{}, Events: Events(ofObject(in.Events, obj)),
	}
	tmpl := in.Kind.Template(obj)
	if tmpl == nil {
		r.Verdict, r.Reason = VerdictNoTemplate, "no pod template of its own: not stamped"
		if p := in.Kind.Problem(obj); p != "" {
			r.Reason = "its pod template does not decode: " + p
		}
		return r
	}
	r.Stamp = StampInfo{Hash: tmpl.Annotations[stamp.HashAnnotation], Sources: tmpl.Annotations[stamp.SourcesAnnotation]}
	refs := stamp.Consumed(obj.GetAnnotations(), &tmpl.Spec, in.Options)
	if rec, ok := stamp.ObservedFor(obj.GetAnnotations(), tmpl); ok {
		r.Record = rec.Hash
		if rec.Certain(refs) {
			r.Basis, r.BasisHash = "record", rec.Hash
		}
	}
	if r.Basis == "none" && r.Stamp.Hash != "" {
		r.Basis, r.BasisHash = "stamp", r.Stamp.Hash
	}
	r.Sources = sources(in, tmpl, refs)
	if r.Basis == "record" && r.Record != r.Stamp.Hash && r.Stamp.Hash != "" {
		r.SourcesNote = fmt.Sprintf("statuses compare the config now with the stamp (%s); its pods run config recorded after it (%s), whose per-source digests are not kept",
			prefix(r.Stamp.Hash), prefix(r.Record))
	}
	if v, ok := obj.GetAnnotations()[stamp.ExtraSourcesAnnotation]; ok {
		_, r.Problems = stamp.ExtraSources(v, in.Options)
	}
	r.SecretsCompared = in.Live.Complete || !stamp.HasSecrets(refs)
	if in.Live.Complete {
		r.Current = StampInfo{Hash: in.Live.Stamp.Hash, Sources: in.Live.Stamp.SourcesAnnotation()}
	}
	r.Verdict, r.Reason, r.Roll = verdict(in, &r, refs)
	return r
}

// verdict is the watcher's decision (decide.Decide, as watcher/workloads.go makes it)
// in words.
func verdict(in Input, r *Report, refs []stamp.Source) (code, reason string, roll bool) {
	switch {
	case r.Skipped:
		return VerdictSkipped, "skipped: annotation " + stamp.SkipAnnotation + "=true", false
	case in.Object.GetDeletionTimestamp() != nil:
		return VerdictDeleting, "being deleted: configstamp leaves it alone", false
	case in.KindNotCovered:
		return VerdictNotInScope, fmt.Sprintf("configstamp does not cover %ss: the server runs without --argo-rollouts (the registration's %s has no %s)",
			r.Kind, stamp.CoverageAnnotation, in.Kind.Resource), false
	case in.ScopeUnknown:
		return VerdictUnknownScope, fmt.Sprintf("scope unknown: namespace %s could not be read, and the %s has no label %s=%s; if the namespace opts in, it is judged as below",
			r.Namespace, r.Kind, in.NamespaceLabel, stamp.InjectValue), false
	case !in.InScope:
		return VerdictNotInScope, fmt.Sprintf("namespace not opted in: neither namespace %s nor the %s has the label %s=%s (or the namespace is excluded)",
			r.Namespace, r.Kind, in.NamespaceLabel, stamp.InjectValue), false
	case len(refs) == 0:
		return VerdictNoSources, "consumes no ConfigMap" + map[bool]string{true: " or Secret", false: ""}[in.Options.Secrets] + ": nothing to stamp", false
	}
	dIn := decide.Input{Template: in.Kind.Template(in.Object), Refs: refs, Basis: r.BasisHash, Certain: r.Basis == "record",
		Record: r.Record, Want: in.Live.Stamp, RollStale: in.RollStale}
	ev := &gathered{in: in, r: r, refs: refs}
	if !in.Live.Complete {
		return incomplete(dIn, ev, r)
	}
	d, _ := decide.Decide(dIn, ev) // gathered evidence fails only with decide.ErrUnknown
	want := in.Live.Stamp
	switch d.Action {
	case decide.Current:
		switch {
		case want.Hash == "":
			return VerdictUpToDate, "up to date: every source it consumes is ignored (" + stamp.IgnoreAnnotation + ")", false
		case r.Stamp.Hash == "":
			return VerdictNotStamped, "not stamped yet (created before configstamp; adopted, not rolled): its pods run the current config", false
		}
		if since := r.ids(""); len(since) > 0 {
			return VerdictUpToDate, "up to date: " + strings.Join(since, ", ") + " changed since its pods started, but none of the keys they see did", false
		}
		return VerdictUpToDate, "up to date", false
	case decide.Held:
		return VerdictHeld, strings.Join(d.Unmet, "; ") + ", rollout held (new pods could not start); it rolls when the config returns", false
	case decide.TooLarge:
		return VerdictTooLarge, fmt.Sprintf("would roll, but configstamp's annotations would take the pod template's annotations past the API server's limit of %d bytes: left alone (not stamped, not rolled) until they are smaller",
			stamp.AnnotationSizeLimit), false
	case decide.Roll:
		if d.Why != decide.WhyCertain {
			return byTimes(d, r)
		}
		changed := r.ids(StatusChanged, StatusAdded, StatusRemoved)
		switch {
		case want.Hash == "":
			return VerdictWouldRoll, "every source it consumes is now ignored (" + stamp.IgnoreAnnotation + "): it rolls once, to drop the stamp", true
		case len(changed) == 0 || r.Record != r.Stamp.Hash:
			// The stamp's per-source digests don't describe what the pods run (its
			// record does, as a whole hash only).
			return VerdictWouldRoll, fmt.Sprintf("config changed since the config its pods run was recorded (%s -> %s)", prefix(r.BasisHash), prefix(want.Hash)), true
		}
		return VerdictWouldRoll, strings.Join(changed, ", ") + " changed since the last rollout", true
	}
	return byTimes(d, r)
}

// incomplete decides without the Secrets' digests (no hash key): from the ConfigMaps'
// digests against the stamp's, when those describe what the pods run, and a Secret
// deleted since the stamp. Once something changed, whether required config is missing
// is judged on every source read (it needs no key). A Secret that changed without being
// deleted is not seen: then it says unknown, where the watcher may roll or hold.
func incomplete(dIn decide.Input, ev *gathered, r *Report) (code, reason string, roll bool) {
	const noKey = " (Secret digests not compared: no hash key)"
	switch {
	case r.Basis == "record" && r.Stamp.Hash == "":
		return VerdictUnknown, "Secret digests can't be compared (no readable --secret-hash-key), and it is not stamped yet: its record keeps one hash of the config its pods run, not per-source digests", false
	case r.Basis == "record" && r.Record != r.Stamp.Hash:
		return VerdictUnknown, fmt.Sprintf("Secret digests can't be compared (no readable --secret-hash-key), and its pods run config recorded after its stamp (record %s, stamp %s): the stamp's per-source digests do not describe it",
			prefix(r.Record), prefix(r.Stamp.Hash)), false
	}
	changed := r.ids(StatusChanged, StatusAdded, StatusRemoved)
	if len(changed) == 0 && r.BasisHash != "" {
		return VerdictUnknown, "Secret digests can't be compared (no readable --secret-hash-key); no ConfigMap changed", false
	}
	if unmet := unmetNow(dIn.Refs, ev.in.Live.Content); len(unmet) > 0 {
		return VerdictHeld, strings.Join(unmet, "; ") + ", rollout held (new pods could not start); it rolls when the config returns" + noKey, false
	}
	d, _ := decide.ShouldRoll(dIn, ev)
	if d.Action == decide.Roll && d.Why == decide.WhyCertain {
		return VerdictWouldRoll, strings.Join(changed, ", ") + " changed since the last rollout" + noKey, true
	}
	code, reason, roll = byTimes(d, r)
	if code == VerdictWouldRoll {
		reason += noKey
	}
	return code, reason, roll
}

// unmetNow is what required config the pods would lack (stamp.Stamp.Unmet) with the
// content read, in source order; a source that could not be read (a Secret without
// access) is left out.
func unmetNow(refs []stamp.Source, content map[string]*corev1.ConfigMap) []string {
	var out []string
	for _, ref := range refs {
		cm, read := content[ref.ID()]
		if !read || stamp.Ignored(cm) {
			continue
		}
		if u := ref.Unmet(cm); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// byTimes says in words a decision made without a certain basis (decide.ShouldRoll):
// from the times of its pods and its config and, for an unstamped workload, whether it
// was created after configstamp covered it.
func byTimes(d decide.Decision, r *Report) (code, reason string, roll bool) {
	kept, keptReason := VerdictUpToDate, "the stamp is not certain (no valid record)"
	if r.BasisHash == "" {
		kept, keptReason = VerdictNotStamped, "not stamped yet"
	}
	ev := r.Evidence
	at := func(t *time.Time) string { return t.UTC().Format(time.RFC3339) }
	switch d.Action {
	case decide.Roll:
		return VerdictWouldRoll, fmt.Sprintf("config written at or after its pods started (%s), and no certain record of what they run: the watcher rolls it", at(ev.PodsSince)), true
	case decide.Record:
		switch d.Why {
		case decide.WhyInstalledOver:
			return kept, keptReason + " (created before configstamp covered it, or opted in by its own label): adopted, not rolled; the watcher records the config as the one its pods run (--roll-stale-at-install rolls it when the config was written after its pods started; a change the watcher sees while it runs rolls it)", false
		case decide.WhyPodsPending:
			return kept, keptReason + ": its controller has not taken the current template in yet, so its pods will read the config as it is; the watcher records it, no rollout", false
		}
		return kept, fmt.Sprintf("%s: its pods started (%s) after the config was last written: they run it; the watcher records it, no rollout", keptReason, at(ev.PodsSince)), false
	}
	covered := ""
	if slices.Contains(d.Unknown, decide.EvidenceCoverage) {
		covered = fmt.Sprintf(" (and only if it was created after configstamp began to cover its kind, registration's %s, and after its namespace's last write: the registration or the namespace could not be read)",
			stamp.CoverageAnnotation)
	}
	switch {
	case slices.Contains(d.Unknown, decide.EvidencePods) && r.Evidence.podsErr == "":
		return VerdictDependsOnTimes, keptReason + ": the watcher decides from times, not read here: it rolls if the config was written at or after its pods started" + covered + ", else records the config as the one they run", false
	case slices.Contains(d.Unknown, decide.EvidencePods):
		return VerdictDependsOnTimes, keptReason + ": when its pods started can't be read (" + r.Evidence.podsErr + "): the watcher rolls it if the config was written at or after then" + covered + ", else records it", false
	case slices.Contains(d.Unknown, decide.EvidenceConfig):
		return VerdictDependsOnTimes, fmt.Sprintf("%s: the watcher rolls it if a source was written at or after its pods started (%s)%s, else records it; some sources could not be read", keptReason, at(ev.PodsSince), covered), false
	}
	return VerdictDependsOnTimes, fmt.Sprintf("not stamped yet, config written at or after its pods started (%s): the watcher rolls it if it was created after configstamp began to cover its kind (registration's %s) and after its namespace's last write, else records it (the registration or the namespace could not be read)",
		at(ev.PodsSince), stamp.CoverageAnnotation), false
}

// gathered is the evidence Explain was given (Input.Times and Input.Live), as the
// decision reads it; what it reads is shown in Report.Evidence. What was not read is
// decide.ErrUnknown.
type gathered struct {
	in   Input
	r    *Report
	refs []stamp.Source
}

func (g *gathered) evidence() *Evidence {
	if g.r.Evidence == nil {
		g.r.Evidence = &Evidence{}
	}
	return g.r.Evidence
}

// Bypassed: as the watcher's, from the registration's coverage and the namespace
// Gather read; not known when either could not be read.
func (g *gathered) Bypassed() (bool, error) {
	ev, t := g.evidence(), g.in.Times
	if t == nil || t.Coverage == nil {
		return false, decide.ErrUnknown
	}
	hasSecrets := stamp.HasSecrets(g.refs)
	kindSince, secretsSince := t.Coverage[g.in.Kind.Resource], t.Coverage[decide.CoverageSecrets]
	b := false
	switch {
	case kindSince.IsZero() || hasSecrets && secretsSince.IsZero():
		// Not covered: known without the namespace.
	case t.Namespace == nil:
		return false, decide.ErrUnknown
	case t.NamespaceIncluded:
		b = decide.CreatedCovered(g.in.Object.GetCreationTimestamp().Time, kindSince, secretsSince, hasSecrets, workload.LastWrite(t.Namespace))
	}
	ev.CreatedCovered = &b
	return b, nil
}

func (g *gathered) PodsSince() (time.Time, bool, error) {
	ev, t := g.evidence(), g.in.Times
	if t == nil {
		return time.Time{}, false, decide.ErrUnknown
	}
	if t.PodsErr != "" {
		ev.podsErr = t.PodsErr
		return time.Time{}, false, decide.ErrUnknown
	}
	if t.PodsKnown {
		since := t.PodsSince
		ev.PodsSince = &since
	}
	return t.PodsSince, t.PodsKnown, nil
}

// ConfigNewer reads the sources' metadata from the content Gather read.
func (g *gathered) ConfigNewer(since time.Time) (bool, error) {
	ev := g.evidence()
	tmpl := g.in.Kind.Template(g.in.Object)
	w, err := decide.Written(g.refs, tmpl.Annotations[stamp.SourcesAnnotation], since, true, func(src stamp.Source) (metav1.Object, error) {
		cm, read := g.in.Live.Content[src.ID()]
		switch {
		case !read:
			return nil, decide.ErrUnknown
		case cm == nil:
			return nil, nil
		}
		return cm, nil
	})
	if !w.Latest.IsZero() {
		ev.ConfigWritten = &w.Latest
	}
	ev.ConfigDeleted = w.Deleted
	return w.Newer, err
}

// ids lists the sources with one of the statuses; with "" alone, those written since
// the workload's last write with an unchanged digest.
func (r *Report) ids(statuses ...string) []string {
	var out []string
	for _, s := range r.Sources {
		if statuses[0] == "" {
			if s.WrittenSince && s.Status == StatusUnchanged {
				out = append(out, s.ID())
			}
			continue
		}
		if slices.Contains(statuses, s.Status) {
			out = append(out, s.ID())
		}
	}
	return out
}

// sources compares each source's stamped digest with its digest now.
func sources(in Input, tmpl *corev1.PodTemplateSpec, refs []stamp.Source) []Source {
	obj := in.Object
	stamped := stamp.ParseSources(tmpl.Annotations[stamp.SourcesAnnotation])
	hasStamp := tmpl.Annotations[stamp.HashAnnotation] != ""
	current := map[string]stamp.Digest{}
	for _, d := range in.Live.Stamp.Sources {
		current[d.Kind+"/"+d.Name] = d
	}
	how := via(obj.GetAnnotations(), &tmpl.Spec, in.Options)
	// "Written since" is since its pods began to be created when that is known, else
	// since the workload's last write.
	since := workload.LastWrite(obj)
	if t := in.Times; t != nil && t.PodsKnown && t.PodsErr == "" {
		since = t.PodsSince
	}
	out := make([]Source, 0, len(refs))
	seen := map[string]bool{}
	for _, ref := range refs {
		id := ref.ID()
		seen[id] = true
		s := Source{Kind: ref.Kind, Name: ref.Name, Use: use(ref, how), Stamped: stamped[id]}
		cm, read := in.Live.Content[id]
		d, digested := current[id]
		switch {
		case read && stamp.Ignored(cm):
			s.Status = StatusIgnored
		case !digested && read && cm == nil && s.Stamped != "" && s.Stamped != "missing" && hasStamp:
			// A Secret, not digested, deleted since the stamp: changed without a key.
			s.Status, s.Current, s.Missing, s.Unmet = StatusChanged, "missing", true, ref.Unmet(nil)
		case !digested:
			s.Status = StatusUnknown
		default:
			s.Current, s.Missing, s.Unmet = digestString(d), d.Missing, d.Unmet
			switch {
			case !hasStamp:
				s.Status = StatusNotStamped
			case s.Stamped == "":
				s.Status = StatusAdded
			case s.Stamped == s.Current:
				s.Status = StatusUnchanged
			default:
				s.Status = StatusChanged
			}
		}
		if cm != nil {
			s.Unconsumed = unconsumed(ref, cm)
			s.WrittenSince = workload.LastWrite(cm).After(since)
		}
		s.Note = note(s)
		out = append(out, s)
	}
	for _, id := range slices.Sorted(maps.Keys(stamped)) {
		if seen[id] {
			continue
		}
		kind, name, _ := strings.Cut(id, "/")
		s := Source{Kind: kind, Name: name, Stamped: stamped[id], Status: StatusRemoved, Use: Use{Via: []string{}}}
		s.Note = note(s)
		out = append(out, s)
	}
	return out
}

// note says in words what a source's status means for a rollout.
func note(s Source) string {
	switch s.Status {
	case StatusChanged:
		if s.Missing {
			return s.ID() + " was deleted since the last rollout"
		}
		return s.ID() + " changed since the last rollout"
	case StatusAdded:
		return "not in the stamp: consumed since it was made, or counted since (Secrets turned on)"
	case StatusRemoved:
		return "no longer consumed"
	case StatusIgnored:
		return "annotated " + stamp.IgnoreAnnotation + "=true: not hashed"
	case StatusUnknown:
		return "Secret digest not compared: no hash key"
	}
	var parts []string
	if s.Unmet != "" {
		parts = append(parts, s.Unmet)
	} else if s.Missing {
		parts = append(parts, "missing (optional)")
	}
	if s.WrittenSince && s.Status == StatusUnchanged {
		parts = append(parts, "changed since its pods started, but not in a key they see")
	}
	if len(s.Unconsumed) > 0 {
		parts = append(parts, "key "+strings.Join(s.Unconsumed, ", ")+": pods do not see it, changes roll nothing")
	}
	return strings.Join(parts, "; ")
}

// unconsumed lists the keys of cm the pods of ref do not see.
func unconsumed(ref stamp.Source, cm *corev1.ConfigMap) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(cm.Data)) {
		if !ref.AllKeys && !slices.Contains(ref.Keys, k) {
			out = append(out, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(cm.BinaryData)) {
		if _, dup := cm.Data[k]; dup {
			continue
		}
		if !ref.Binary || (!ref.AllKeys && !slices.Contains(ref.Keys, k)) {
			out = append(out, k)
		}
	}
	return out
}

// digestString is a digest as the sources annotation writes it.
func digestString(d stamp.Digest) string {
	one := stamp.Combine([]stamp.Digest{d}).SourcesAnnotation()
	_, v, _ := strings.Cut(one, "=")
	return v
}

// prefix is the first 12 characters of a hash, as Events and the sources annotation
// show them.
func prefix(h string) string { return h[:min(len(h), 12)] }

// Reasons of the Events configstamp records on workloads (watcher's Reason*).
var eventReasons = []string{"ConfigChanged", "StampBypassed", "ConfigMissing", "StampTooLarge", "ConfigUnreadable"}

// maxEvents is how many of the latest Events a report shows.
const maxEvents = 10

// Events returns configstamp's Events among evs, oldest first, the latest maxEvents;
// Events that say the same (type, reason and message) are shown once, at the latest
// time, with their counts added.
func Events(evs []corev1.Event) []Event {
	out := []Event{}
	same := map[[3]string]int{}
	for _, e := range evs {
		if !slices.Contains(eventReasons, e.Reason) {
			continue
		}
		ev := Event{Time: eventTime(e), Type: e.Type, Reason: e.Reason, Message: e.Message, Count: max(e.Count, 1)}
		if e.Series != nil {
			ev.Count = max(ev.Count, e.Series.Count)
		}
		id := [3]string{e.Type, e.Reason, e.Message}
		if i, ok := same[id]; ok {
			out[i].Count += ev.Count
			if ev.Time.After(out[i].Time) {
				out[i].Time = ev.Time
			}
			continue
		}
		same[id] = len(out)
		out = append(out, ev)
	}
	slices.SortStableFunc(out, func(a, b Event) int { return a.Time.Compare(b.Time) })
	if len(out) > maxEvents {
		out = out[len(out)-maxEvents:]
	}
	return out
}

// ofObject keeps the Events about obj itself: not those of an earlier object of the
// same name (another UID).
func ofObject(evs []corev1.Event, obj client.Object) []corev1.Event {
	if obj.GetUID() == "" {
		return evs
	}
	var out []corev1.Event
	for _, e := range evs {
		if e.InvolvedObject.UID == "" || e.InvolvedObject.UID == obj.GetUID() {
			out = append(out, e)
		}
	}
	return out
}

// eventTime is when an Event (core or events.k8s.io, which the watcher writes) last
// happened.
func eventTime(e corev1.Event) time.Time {
	t := e.EventTime.Time
	for _, c := range []time.Time{e.LastTimestamp.Time, e.FirstTimestamp.Time, e.CreationTimestamp.Time} {
		if c.After(t) {
			t = c
		}
	}
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	return t
}
