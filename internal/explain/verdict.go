package explain

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/internal/decide"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// deletingReason is why a workload being deleted does not roll, in explain and impact.
const deletingReason = "being deleted: configstamp leaves it alone"

// kindNotCoveredReason is why a workload of a kind configstamp does not cover does not
// roll, in explain and impact.
func kindNotCoveredReason(k *workload.Kind) string {
	return fmt.Sprintf("configstamp does not cover %ss: the server runs without --argo-rollouts (the registration's %s has no %s)",
		strings.ToLower(k.Kind), stamp.CoverageAnnotation, k.Resource)
}

// tooManySourcesReason is why a workload past the source cap does not roll.
func tooManySourcesReason(n int, opts stamp.Options) string {
	return fmt.Sprintf("consumes %d sources, more than configstamp's cap of %d (--max-sources): left as stamped, not rolled on config changes", n, opts.SourceCap())
}

// scopeOf is a workload's scope as Gather found it, for decide.Gate.
func scopeOf(inScope, unknown bool) func() (decide.Scope, error) {
	return func() (decide.Scope, error) {
		switch {
		case unknown:
			return decide.ScopeUnknown, nil
		case inScope:
			return decide.InScope, nil
		}
		return decide.OutOfScope, nil
	}
}

// gate is decide.Gate of the workload of in, consuming refs.
func gate(in Input, refs []stamp.Source) (decide.Stop, error) {
	return decide.Gate(decide.Entry{Object: in.Object, KindNotCovered: in.KindNotCovered, Refs: refs, Options: in.Options}, scopeOf(in.InScope, in.ScopeUnknown))
}

// verdict is the watcher's decision (decide.Gate, then decide.Decide, as
// watcher/check.go makes it) in words.
func verdict(in Input, r *Report, refs []stamp.Source) (code, reason string, roll bool) {
	stop, _ := gate(in, refs)
	switch stop {
	case decide.StopSkipped:
		return VerdictSkipped, "skipped: annotation " + stamp.SkipAnnotation + "=true", false
	case decide.StopDeleting:
		return VerdictDeleting, deletingReason, false
	case decide.StopKindNotCovered:
		return VerdictNotInScope, kindNotCoveredReason(in.Kind), false
	case decide.StopScopeUnknown:
		return VerdictUnknownScope, fmt.Sprintf("scope unknown: namespace %s could not be read, and the %s has no label %s=%s; if the namespace opts in, it is judged as below",
			r.Namespace, r.Kind, in.NamespaceLabel, stamp.InjectValue), false
	case decide.StopNotInScope:
		return VerdictNotInScope, fmt.Sprintf("namespace not opted in: neither namespace %s nor the %s has the label %s=%s (or the namespace is excluded)",
			r.Namespace, r.Kind, in.NamespaceLabel, stamp.InjectValue), false
	case decide.StopNoSources:
		return VerdictNoSources, "consumes no ConfigMap" + map[bool]string{true: " or Secret", false: ""}[in.Options.Secrets] + ": nothing to stamp", false
	case decide.StopTooManySources:
		return VerdictTooManySources, tooManySourcesReason(len(refs), in.Options), false
	}
	if in.Kind.CreateOnly() {
		return createOnly(in, r)
	}
	dIn := decide.Input{Template: in.Kind.Template(in.Object), Refs: refs, Basis: r.BasisHash, Certain: r.Basis == "record",
		Record: r.Record, Want: in.Live.Stamp, RollStale: in.RollStale, NoPods: in.Kind.NoPods()}
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
		if note := podsBehind(in); note != "" {
			return VerdictUpToDate, "template stamped with the current config, " + note, false
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

// createOnly is the verdict on a workload of a kind stamped at CREATE only (a Job): the
// watcher never checks or writes it.
//
// Its stamp is the config at its creation; its pods read config when they start, which
// for a Job created suspended (Kueue's are) is when it is resumed.
func createOnly(in Input, r *Report) (code, reason string, roll bool) {
	kind := strings.ToLower(in.Kind.Kind)
	notStarted := ""
	if t := in.Times; t != nil && t.PodsErr == "" && !t.PodsKnown {
		notStarted = "; it has not started (suspended): its pods will read the config as it is when it starts, not its stamp's"
	}
	switch {
	case r.Stamp.Hash == "":
		return VerdictNotStamped, fmt.Sprintf("not stamped: a %s is stamped at its creation only (its template cannot change), and this one was created before configstamp covered it or past its webhook", kind), false
	case !in.Live.Complete:
		return VerdictUnknown, "digests can't be compared (no readable --hash-key, and the webhook's dry-run failed)", false
	case in.Live.Stamp.Hash == r.Stamp.Hash:
		return VerdictUpToDate, "up to date: stamped at its creation with the config as it is now" + notStarted, false
	}
	return VerdictStampedAtCreate, fmt.Sprintf("config changed since it was created (%s -> %s): a %s's template cannot change, so nothing rolls; its pods that started before the change run the older config (one created suspended starts when resumed: its pods that started after the change run the newer config, which its stamp does not show), and a new %s is stamped at its creation%s",
		prefix(r.Stamp.Hash), prefix(in.Live.Stamp.Hash), kind, kind, notStarted), false
}

// incomplete decides without digests (no readable hash key, and the webhook's dry-run
// failed): from a source deleted since the stamp, when the stamp describes what the pods
// run. Once something changed, whether required config is missing
// is judged on every source read (it needs no key). A Secret that changed without being
// deleted is not seen: then it says unknown, where the watcher may roll or hold.
func incomplete(dIn decide.Input, ev *gathered, r *Report) (code, reason string, roll bool) {
	const noKey = " (digests not compared: no readable hash key, and the webhook's dry-run failed)"
	switch {
	case r.Basis == "record" && r.Stamp.Hash == "":
		return VerdictUnknown, "digests can't be compared (no readable --hash-key, and the webhook's dry-run failed), and it is not stamped yet: its record keeps one hash of the config its pods run, not per-source digests", false
	case r.Basis == "record" && r.Record != r.Stamp.Hash:
		return VerdictUnknown, fmt.Sprintf("digests can't be compared (no readable --hash-key, and the webhook's dry-run failed), and its pods run config recorded after its stamp (record %s, stamp %s): the stamp's per-source digests do not describe it",
			prefix(r.Record), prefix(r.Stamp.Hash)), false
	}
	changed := r.ids(StatusChanged, StatusAdded, StatusRemoved)
	if len(changed) == 0 && r.BasisHash != "" {
		return VerdictUnknown, "digests can't be compared (no readable --hash-key, and the webhook's dry-run failed); no source was deleted", false
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
	if ev == nil {
		ev = &Evidence{}
	}
	at := func(t *time.Time) string {
		if t == nil {
			return "not read"
		}
		return t.UTC().Format(time.RFC3339)
	}
	switch d.Action {
	case decide.Roll:
		switch d.Why {
		case decide.WhyNextRun:
			return VerdictWouldRoll, "its template's stamp is not the current config's: the watcher restamps it, so its next run gets the current stamp (no Job is started; running ones keep what they read)", true
		case decide.WhyOwed:
			return VerdictWouldRoll, fmt.Sprintf("not stamped yet (installed over), but config written (%s) after configstamp began to cover it (%s) and at or after its pods started (%s): a change made while configstamp watched it, owed a rollout (its check may have been lost with a leader change): the watcher rolls it",
				at(ev.ConfigWritten), at(ev.CoveredSince), at(ev.PodsSince)), true
		}
		return VerdictWouldRoll, fmt.Sprintf("config written at or after its pods started (%s), and no certain record of what they run: the watcher rolls it", at(ev.PodsSince)), true
	case decide.Record:
		switch d.Why {
		case decide.WhyInstalledOver:
			return kept, keptReason + " (created before configstamp covered it, or opted in by its own label): adopted, not rolled; the watcher records the config as the one its pods run (--roll-stale-at-install rolls it when the config was written after its pods started; a source written after configstamp began to cover it and after its pods started rolls it)", false
		case decide.WhyNextRun:
			return VerdictUpToDate, "template stamped with the current config, which its next run gets; the watcher records it", false
		case decide.WhyPodsPending:
			return kept, keptReason + ": its controller has not taken the current template in yet, so its pods will read the config as it is; the watcher records it, no rollout", false
		}
		return kept, fmt.Sprintf("%s: its pods started (%s) after the config was last written: they run it; the watcher records it, no rollout", keptReason, at(ev.PodsSince)), false
	}
	covered := ""
	if ev != nil && ev.CoveredSince != nil && ev.CreatedCovered != nil && !*ev.CreatedCovered {
		covered = fmt.Sprintf(" (installed over: and after configstamp began to cover it, %s)", at(ev.CoveredSince))
	}
	if slices.Contains(d.Unknown, decide.EvidenceCoverage) {
		covered = fmt.Sprintf(" (and only if it was created after configstamp began to cover its kind, registration's %s, and after its namespace's last write: the registration or the namespace could not be read)",
			stamp.CoverageAnnotation)
	}
	switch {
	case slices.Contains(d.Unknown, decide.EvidencePods) && ev.podsErr == "":
		return VerdictDependsOnTimes, keptReason + ": the watcher decides from times, not read here: it rolls if the config was written at or after its pods started" + covered + ", else records the config as the one they run", false
	case slices.Contains(d.Unknown, decide.EvidencePods):
		return VerdictDependsOnTimes, keptReason + ": when its pods started can't be read (" + ev.podsErr + "): the watcher rolls it if the config was written at or after then" + covered + ", else records it", false
	case slices.Contains(d.Unknown, decide.EvidenceConfig):
		return VerdictDependsOnTimes, fmt.Sprintf("%s: the watcher rolls it if a source was written at or after its pods started (%s)%s, else records it; some sources could not be read", keptReason, at(ev.PodsSince), covered), false
	}
	return VerdictDependsOnTimes, fmt.Sprintf("not stamped yet, config written at or after its pods started (%s): the watcher rolls it if it was created after configstamp began to cover its kind (registration's %s) and after its namespace's last write, or if that config was written after then, else records it (the registration or the namespace could not be read)",
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

// Coverage is decide.Covered, with the registration's coverage and the namespace
// Gather read; not known when either could not be read.
func (g *gathered) Coverage() (decide.Coverage, error) {
	ev, t := g.evidence(), g.in.Times
	if t == nil || t.Coverage == nil {
		return decide.Coverage{}, decide.ErrUnknown
	}
	c, err := decide.Covered(g.in.Object, g.refs, t.Coverage[g.in.Kind.Resource], t.Coverage[decide.CoverageSecrets], decide.ScopeSince(t.Coverage),
		func() (metav1.Object, bool, error) {
			if t.Watched {
				if !t.NamespaceIncluded {
					return nil, false, nil
				}
				return decide.WatchedNamespace(g.in.Object.GetNamespace(), t.Coverage[decide.CoverageNamespace(g.in.Object.GetNamespace())])
			}
			if t.Namespace == nil {
				return nil, false, decide.ErrUnknown
			}
			return t.Namespace, t.NamespaceIncluded, nil
		})
	if err == nil {
		ev.CreatedCovered = &c.Bypassed
		if !c.Since.IsZero() {
			ev.CoveredSince = &c.Since
		}
	}
	return c, err
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

// podsBehind says how many pods of a workload whose controller replaces them only when
// deleted or above a partition still run an older template, and the config they run
// when its record names it (stamp.Observed.Behind); "" when none.
func podsBehind(in Input) string {
	behind, total, partial := in.Kind.Behind(in.Object)
	if !partial || behind == 0 {
		return ""
	}
	config := "the old config"
	if rec, ok := stamp.ObservedFor(in.Object.GetAnnotations(), in.Kind.Template(in.Object)); ok && rec.Behind != "" {
		config = "the old config (" + stamp.ShortHash(rec.Behind) + ")"
	}
	return fmt.Sprintf("%d of %d pods still on %s: its controller replaces them only when they are deleted (updateStrategy OnDelete) or above its partition", behind, total, config)
}
