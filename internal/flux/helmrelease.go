// Package flux holds what configstamp knows about Flux HelmReleases: which ConfigMap and
// Secret keys a HelmRelease takes its Helm values from (spec.valuesFrom), and when to ask
// helm-controller to reconcile it. helm-controller reads valuesFrom afresh at each
// reconcile but reconciles only on a generation change or a new value of
// reconcile.fluxcd.io/requestedAt: an edit of a values ConfigMap upgrades nothing until
// something asks. A HelmRelease has no pod template, so it is not a workload.Kind: the
// watcher writes the request itself (no webhook), and keeps the keyed digest of what the
// HelmRelease takes beside it, so it asks once per change, across restarts.
package flux

import (
	"slices"
	"strings"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/configstamp/configstamp/stamp"
)

// HelmRelease names the kind in the API: helm.toolkit.fluxcd.io/v2 helmreleases.
var HelmRelease = schema.GroupVersionResource{Group: helmv2.GroupVersion.Group, Version: helmv2.GroupVersion.Version, Resource: "helmreleases"}

// Kind is HelmRelease's kind name.
const Kind = helmv2.HelmReleaseKind

// RequestedAtAnnotation is Flux's request for a reconcile: a new value makes
// helm-controller reconcile the HelmRelease (and upgrade it when its values changed).
const RequestedAtAnnotation = meta.ReconcileRequestAnnotation

// DefaultValuesKey is the key valuesFrom takes when it names none (Flux's default).
const DefaultValuesKey = "values.yaml"

// AddToScheme registers HelmRelease and HelmReleaseList (helm-controller's api module).
var AddToScheme = helmv2.AddToScheme

// Sources are what hr takes values from, sorted by (kind, name): for each ConfigMap or
// Secret its valuesFrom names (Secrets only when they count under opts), the one data key
// each reference takes (valuesKey, default values.yaml; helm-controller reads data only,
// never binaryData). As helm-controller reads them, an optional reference whose source
// or key is missing is skipped; a missing one of a required reference fails: a source
// is required unless every reference to it is optional, a key when a required reference
// takes it.
func Sources(hr *helmv2.HelmRelease, opts stamp.Options) []stamp.Source {
	if hr == nil {
		return nil
	}
	byName := map[string]*stamp.Source{}
	for _, ref := range hr.Spec.ValuesFrom {
		kind := stamp.FindSourceKind("", ref.Kind)
		if kind == nil || !kind.Counts(opts) || ref.Name == "" {
			continue
		}
		key := ref.ValuesKey
		if key == "" {
			key = DefaultValuesKey
		}
		id := kind.Name + "/" + ref.Name
		s := byName[id]
		if s == nil {
			s = &stamp.Source{Kind: kind.Name, Name: ref.Name}
			byName[id] = s
		}
		s.Keys = appendKey(s.Keys, key)
		if !ref.Optional {
			s.Required = true
			s.RequiredKeys = appendKey(s.RequiredKeys, key)
			s.RequiredEnvKeys = appendKey(s.RequiredEnvKeys, key)
		}
	}
	out := make([]stamp.Source, 0, len(byName))
	for _, s := range byName {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b stamp.Source) int {
		if c := strings.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// appendKey adds key to the sorted, unique keys.
func appendKey(keys []string, key string) []string {
	i, found := slices.BinarySearch(keys, key)
	if found {
		return keys
	}
	return slices.Insert(keys, i, key)
}

// Action is what the watcher does about a HelmRelease.
type Action int

// The actions.
const (
	// Nothing: the record matches what the HelmRelease takes (or it takes nothing).
	Nothing Action = iota
	// Record: first sight, or a record under another hash key with no change of a
	// source seen live: write the record, request nothing. A HelmRelease reconciles when
	// it is created; one configstamp is installed over is taken as reconciled.
	Record
	// Request: what it takes changed since the record: request a reconcile and write
	// the new record, in one write.
	Request
	// Suspended: it changed, but the HelmRelease is suspended: leave it alone (an Event
	// says so); the change is requested once it is resumed.
	Suspended
	// Held: it changed, but a required source or key is missing now (helm-controller
	// would fail the upgrade): nothing is requested; when it returns as it was, nothing
	// is either.
	Held
)

// String names the action in logs.
func (a Action) String() string {
	return [...]string{"nothing", "record", "request", "suspended", "held"}[a]
}

// RecordOf is the value of stamp.ValuesAnnotation for a combined hash under the key of
// fingerprint fp: "fp:hash" ("" when the HelmRelease takes nothing).
func RecordOf(fp, hash string) string {
	if hash == "" {
		return ""
	}
	return fp + ":" + hash
}

// Decide says what to do about hr, whose sources now give the record want (RecordOf);
// unmet is true when a required source or key of them is missing; changedLive when the
// check follows a write of one of its sources that the watcher saw (not a replay). With
// no record (or a malformed one) it is first sight: recorded only. A record made under
// another hash key (a rotation) cannot be compared with want: it is only written anew,
// unless a source changed live: that change is then requested, not lost. Pure: the
// watcher's one rule for HelmReleases.
func Decide(hr *helmv2.HelmRelease, want string, unmet, changedLive bool) Action {
	if hr == nil || want == "" {
		return Nothing
	}
	have := hr.GetAnnotations()[stamp.ValuesAnnotation]
	if have == want {
		return Nothing
	}
	haveFP, _, ok := strings.Cut(have, ":")
	wantFP, _, _ := strings.Cut(want, ":")
	if !ok || !stamp.IsKeyFingerprint(haveFP) || (haveFP != wantFP && !changedLive) {
		return Record
	}
	if hr.Spec.Suspend {
		return Suspended
	}
	if unmet {
		return Held
	}
	return Request
}
