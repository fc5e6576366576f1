package explain

import (
	"slices"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/decide"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// ImpactReport says which workloads consume one source and whether a change of it (or
// of one key) rolls each.
type ImpactReport struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Key is the key asked about ("" for any change).
	Key string `json:"key,omitempty"`
	// Ignored: the source is annotated configstamp.io/ignore=true (no change of it rolls
	// anything).
	Ignored   bool       `json:"ignored,omitempty"`
	Workloads []Consumer `json:"workloads"`
	// Waves: a change of it rolls its consumers in waves (docs/waves.md); nil: not.
	Waves *WavesPlan `json:"waves,omitempty"`
}

// Consumer is one workload that consumes the source.
type Consumer struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	Use
	// Roll: a change (of Key) would roll it; Reason says why or why not.
	Roll   bool   `json:"roll"`
	Reason string `json:"reason"`
}

// Candidate is a workload of the namespace, with whether it is in scope.
type Candidate struct {
	Kind    *workload.Kind
	Object  client.Object
	InScope bool
	// ScopeUnknown: its namespace could not be read and it is not labelled.
	ScopeUnknown bool
	// KindNotCovered: the registration shows configstamp does not cover its kind.
	KindNotCovered bool
	// Secrets: whether Secrets count for it (nil: as opts.Secrets says).
	Secrets *bool
}

// Impact lists the candidates that consume kind/name (a Secret counts only where
// Secrets count: the candidate's Secrets, else opts.Secrets), sorted by kind and name.
// ignored tells that the source is annotated configstamp.io/ignore=true.
//
// binaryKey tells that key is one of the source's binaryData keys (env and envFrom do
// not see those).
func Impact(kind, namespace, name, key string, ignored, binaryKey bool, opts stamp.Options, candidates []Candidate) ImpactReport {
	r := ImpactReport{Kind: kind, Namespace: namespace, Name: name, Key: key, Ignored: ignored, Workloads: []Consumer{}}
	all := opts
	all.Secrets = true // find every reference; whether it counts is decided below
	for _, c := range candidates {
		tmpl := c.Kind.Template(c.Object)
		if tmpl == nil {
			continue
		}
		srcs := stamp.Consumed(c.Object.GetAnnotations(), &tmpl.Spec, all)
		i := slices.IndexFunc(srcs, func(s stamp.Source) bool { return s.Kind == kind && s.Name == name })
		if i < 0 {
			continue
		}
		src := srcs[i]
		w := Consumer{Kind: strings.ToLower(c.Kind.Kind), Name: c.Object.GetName(), Use: use(src, via(c.Object.GetAnnotations(), &tmpl.Spec, all))}
		// The entry checks see the sources that count for it (a Secret only where
		// Secrets count, for the cap too). An uncounted Secret alone counts as none:
		// it is told apart below.
		counted := opts
		if c.Secrets != nil {
			counted.Secrets = *c.Secrets
		}
		refs := stamp.Consumed(c.Object.GetAnnotations(), &tmpl.Spec, counted)
		stop, _ := decide.Gate(decide.Entry{Object: c.Object, KindNotCovered: c.KindNotCovered, Refs: refs, Options: counted}, scopeOf(c.InScope, c.ScopeUnknown))
		switch {
		case stop == decide.StopSkipped:
			w.Reason = "skipped: annotation " + stamp.SkipAnnotation + "=true"
		case stop == decide.StopDeleting:
			w.Reason = deletingReason
		case stop == decide.StopKindNotCovered:
			w.Reason = kindNotCoveredReason(c.Kind)
		case stop == decide.StopScopeUnknown:
			w.Reason = "scope unknown: the namespace can't be read and the workload is not labelled; if the namespace opts in, a change of a key it consumes rolls it"
		case stop == decide.StopNotInScope:
			w.Reason = "namespace not opted in (nor the workload), or excluded"
		case stop == decide.StopTooManySources:
			w.Reason = tooManySourcesReason(len(refs), counted)
		case kind == stamp.KindSecret && !counted.Secrets:
			w.Reason = "Secrets are not hashed (configstamp runs without --secrets)"
		case ignored:
			w.Reason = "the source is annotated " + stamp.IgnoreAnnotation + "=true: not hashed"
		case key != "" && !src.AllKeys && !slices.Contains(src.Keys, key):
			w.Reason = "key " + key + " not consumed: pods do not see it"
		case key != "" && binaryKey && !src.Binary:
			w.Reason = "key " + key + " is in binaryData, which env and envFrom do not see: pods do not see it"
		default:
			w.Roll, w.Reason = changeRolls(c.Kind, key)
		}
		r.Workloads = append(r.Workloads, w)
	}
	slices.SortFunc(r.Workloads, func(a, b Consumer) int {
		if c := strings.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return r
}

// changeRolls is whether a change of key ("": any key it consumes) rolls a consumer of
// kind, and why: a Job's template cannot change (stamped at its creation only), and a
// CronJob is restamped for its next run, which starts no Job (as explain says).
func changeRolls(kind *workload.Kind, key string) (bool, string) {
	change := "a change of a key it consumes"
	if key != "" {
		change = "a change of key " + key
	}
	switch {
	case kind.CreateOnly():
		return false, change + " rolls nothing: a " + strings.ToLower(kind.Kind) + " is stamped at its creation only (its template cannot change); the next one is stamped with it"
	case kind.NoPods():
		return true, change + " restamps it for its next run (no Job is started)"
	}
	return true, change + " rolls it"
}
