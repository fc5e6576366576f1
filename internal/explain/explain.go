// Package explain answers "why did (or didn't) my workload roll?" from the objects
// configstamp works with: a workload, the sources it consumes as they are now, its
// namespace and its Events. Explain and Impact are pure functions of those objects;
// Gather reads them from a cluster (the sources with configread, as the webhook reads
// them), and Offline computes a stamp from manifests. The entry checks, the basis, the
// reading of the coverage annotation and the decision are internal/decide's, the
// watcher's own rules (verdict.go puts them in words), on evidence gathered here.
package explain

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	// VerdictPaused: the config differs, but the workload is paused (a Deployment's
	// spec.paused): held until it is resumed, then rolled once.
	VerdictPaused = "paused"
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
	// VerdictUnknown: digests cannot be compared (no readable hash key, no dry-run)
	// and no source was deleted.
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
	// VerdictTooManySources: it consumes more sources than the cap: the webhook keeps
	// the stamp as stored and the watcher leaves it alone (Event TooManySources).
	VerdictTooManySources = "too-many-sources"
	// VerdictStampedAtCreate: a Job (workload.Kind.CreateOnly) stamped at its creation
	// with config that changed since: its template cannot change, so nothing rolls.
	VerdictStampedAtCreate = "stamped-at-create"
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
	// StatusUnknown: a Secret, without the hash key to compare its digest; or any
	// source of a workload the entry checks leave alone (not read).
	StatusUnknown = "unknown"
	// StatusNotStamped: the template carries no per-source digests to compare with.
	StatusNotStamped = "not-stamped"
)

// Report is what explain prints; its JSON and YAML forms are documented in
// docs/troubleshooting.md and kept stable (fields are only ever added).
type Report struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// TemplateOf is "kind/name" of the workload whose pod template it runs and whose
	// report this is (a Rollout's spec.workloadRef); "" for its own.
	TemplateOf string `json:"templateOf,omitempty"`
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
	// Current is the stamp of the config as it is now ("" hash: not computable: no
	// readable hash key, and the webhook's dry-run failed; or not read: the entry
	// checks leave the workload alone).
	Current StampInfo `json:"current"`
	// SecretsCompared: the digests, Secrets' included, could be computed (the hash key
	// was read, or the webhook answered a dry-run).
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
// configstamp covered it (CreatedCovered; nil: not known) and since when it is covered
// (CoveredSince: an installed-over one rolls on config written after then, and at or
// after PodsSince). Unset times are not known.
type Evidence struct {
	PodsSince      *time.Time `json:"podsSince,omitempty"`
	ConfigWritten  *time.Time `json:"configWritten,omitempty"`
	ConfigDeleted  bool       `json:"configDeleted,omitempty"`
	CreatedCovered *bool      `json:"createdCovered,omitempty"`
	CoveredSince   *time.Time `json:"coveredSince,omitempty"`
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
	// NotRead: the entry checks leave the workload alone, so nothing was read.
	NotRead bool
	// nsKey is the namespace's hash key when it was read (nil: the webhook computed
	// the digests).
	nsKey []byte
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
	// Watched: a namespaced install, which reads no Namespace: since when the
	// namespace is watched (its Coverage entry) stands for it (decide.WatchedNamespace).
	Watched bool
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
	rec, recValid := stamp.ObservedFor(obj.GetAnnotations(), tmpl)
	r.Record = rec.Hash
	var certain bool
	r.BasisHash, certain = decide.Basis(r.Stamp.Hash, rec, recValid, refs)
	switch {
	case certain:
		r.Basis = "record"
	case r.BasisHash != "":
		r.Basis = "stamp"
	}
	r.Sources = sources(in, tmpl, refs)
	if r.Basis == "record" && r.Record != r.Stamp.Hash && r.Stamp.Hash != "" {
		r.SourcesNote = fmt.Sprintf("statuses compare the config now with the stamp (%s); its pods run config recorded after it (%s), whose per-source digests are not kept",
			prefix(r.Stamp.Hash), prefix(r.Record))
	}
	if v, ok := obj.GetAnnotations()[stamp.ExtraSourcesAnnotation]; ok {
		_, r.Problems = stamp.ExtraSources(v, in.Options)
	}
	r.SecretsCompared = in.Live.Complete
	if in.Live.Complete {
		r.Current = StampInfo{Hash: in.Live.Stamp.Hash, Sources: in.Live.Stamp.SourcesAnnotation()}
	}
	r.Verdict, r.Reason, r.Roll = verdict(in, &r, refs)
	if r.Verdict == VerdictWouldRoll || r.Verdict == VerdictUnknown {
		if reason, ok := legacyReason(in, &r, refs); ok {
			r.Verdict, r.Reason, r.Roll = VerdictWouldRoll, reason, true
		}
	}
	if r.Verdict == VerdictWouldRoll && in.Kind.Paused(obj) {
		r.Verdict, r.Roll = VerdictPaused, false
		r.Reason += "; but it is paused (spec.paused): held, and rolled once when it is resumed"
	}
	return r
}
