// Package decide holds the watcher's decision for one workload as a function of what
// it reads: the watcher (watcher/workloads.go) acts on it, and `configstamp explain`
// reports it, from the same code. The reads themselves are the caller's: the
// watcher's from the API server, explain's from what it gathered; evidence explain
// could not read is ErrUnknown, which the watcher never returns.
package decide

import (
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/configstamp/configstamp/stamp"
)

// ErrUnknown marks evidence that could not be read. Decide then goes on with the rest:
// a later known answer may decide alone (Record does not depend on it); otherwise the
// decision is Unknown, and Decision.Unknown names what was missing.
var ErrUnknown = errors.New("not known")

// Action is what the watcher does.
type Action string

const (
	// Current: the basis is the current config; nothing rolls (the watcher records
	// it when the basis is not certain, so later decisions are).
	Current Action = "current"
	// Held: the config differs, but required config is missing: new pods could not
	// start; nothing rolls until it returns.
	Held Action = "held"
	// Record: the config differs from the basis, but the pods run it already: the
	// watcher records it as the config they run, no rollout.
	Record Action = "record"
	// Roll: the pods run older config: the watcher nudges the workload.
	Roll Action = "roll"
	// TooLarge: it would roll, but the stamp would take the pod template's annotations
	// past the API server's limit: the webhook would leave it unstamped, so it is
	// left alone.
	TooLarge Action = "too-large"
	// Unknown: evidence it needs could not be read (explain only).
	Unknown Action = "unknown"
)

// Why names what decided a Record or Roll.
type Why string

const (
	// WhyCertain: a record made for this template says what the pods run.
	WhyCertain Why = "certain"
	// WhyLive: the change was seen live (its pods cannot have read it).
	WhyLive Why = "live"
	// WhyInstalledOver: unstamped and created before configstamp covered it (or opted
	// in by its own label), and no source written since it was covered: installing
	// configstamp rolls nothing.
	WhyInstalledOver Why = "installed-over"
	// WhyOwed: installed over, but a source was written after configstamp began to
	// cover it and after its pods began to be created: the watcher saw (or should have
	// seen) that change live, and owed it a rollout it may not have made (a leader
	// change while the check was queued).
	WhyOwed Why = "owed"
	// WhyPodsPending: its controller has not taken the current template in: its pods
	// are still to be created and will read the config as it is.
	WhyPodsPending Why = "pods-pending"
	// WhyConfigOlder: every source was last written before its pods began to be
	// created: they read it.
	WhyConfigOlder Why = "config-older"
	// WhyConfigNewer: a source was written at or after its pods began to be created,
	// or deleted since the stamp.
	WhyConfigNewer Why = "config-newer"
	// WhyNextRun: it runs no pods of its own (a CronJob, Input.NoPods): its template is
	// what its next run copies, so its stamp follows the config (Roll: restamped, which
	// starts nothing) and its record says what the next run gets.
	WhyNextRun Why = "next-run"
)

// Evidence names, in Decision.Unknown.
const (
	EvidenceCoverage = "coverage" // Evidence.Coverage
	EvidencePods     = "pods"     // Evidence.PodsSince
	EvidenceConfig   = "config"   // Evidence.ConfigNewer
)

// Input is what the decision is made on besides Evidence.
type Input struct {
	// Template is the workload's pod template (its stamp, and room for a new one).
	Template *corev1.PodTemplateSpec
	// Refs are the sources it consumes (stamp.Consumed).
	Refs []stamp.Source
	// Basis is the config hash its pods are judged to run, and Certain whether it is
	// its record's (see Basis).
	Basis   string
	Certain bool
	// Record is the hash of its record for this template, certain or not ("": none).
	Record string
	// Want is the stamp of its config as it is now.
	Want stamp.Stamp
	// ChangedLive: a change of one of its sources was seen live.
	ChangedLive bool
	// RollStale: unstamped workloads that predate configstamp roll too
	// (--roll-stale-at-install).
	RollStale bool
	// NoPods: the workload runs no pods of its own (workload.Kind.NoPods: a CronJob).
	NoPods bool
}

// Evidence is what the decision reads, only when the basis is not certain and only as
// far as it needs: Coverage and PodsSince are called at most once, ConfigNewer at most
// twice (an installed-over workload: after its coverage, then after its pods started).
type Evidence interface {
	// Coverage tells whether an unstamped workload was created while the webhook
	// covered it (it should have been stamped then), and since when it is covered: see
	// Covered.
	Coverage() (Coverage, error)
	// PodsSince is when the pods of its current template began to be created; ok is
	// false when its controller has not taken the template in yet
	// (workload.Kind.PodsSince).
	PodsSince() (since time.Time, ok bool, err error)
	// ConfigNewer reports whether a source was written at or after since, or deleted
	// since the stamp (see Written).
	ConfigNewer(since time.Time) (bool, error)
}

// Decision is what the watcher does, and why.
type Decision struct {
	Action Action
	// Why is set for Record and Roll (and for Current, when the basis is certain).
	Why Why
	// Restart: the nudge needs the webhook to set a restart time (the template
	// already carries the wanted stamp but its pods run other config).
	Restart bool
	// Unmet is the required config that is missing (Held).
	Unmet []string
	// Unknown lists the evidence that could not be read (EvidenceCoverage, ...).
	Unknown []string
}

// Decide decides for a workload in scope that consumes Refs, in the watcher's order:
// the basis current; required config missing; whether the pods run older config
// (ShouldRoll); room for the stamp.
func Decide(in Input, ev Evidence) (Decision, error) {
	if in.Basis == in.Want.Hash {
		return Decision{Action: Current}, nil
	}
	if unmet := HeldBy(in.Basis, in.Want); len(unmet) > 0 {
		return Decision{Action: Held, Unmet: unmet}, nil
	}
	d, err := ShouldRoll(in, ev)
	if err != nil || d.Action != Roll {
		return d, err
	}
	stored := in.Template.Annotations[stamp.HashAnnotation]
	d.Restart = stamp.NeedsRestart(stored, in.Want.Hash, in.Certain, in.Record)
	if !StampFits(in.Template.Annotations, in.Want, d.Restart) {
		d.Action = TooLarge
	}
	return d, nil
}

// ShouldRoll decides, for a workload whose basis differs from its config, whether its
// pods run older config (Roll) or already run it (Record). A certain basis or a change
// seen live always rolls. Otherwise the times decide: config written at or after its
// current pods began to be created rolls.
//
// An unstamped workload that predates configstamp's coverage (installed over) is only
// recorded, unless RollStale, or unless a source was written after it was covered
// (Coverage.Since; a tie counts as before) as well as at or after its pods began: that
// write happened while configstamp watched the workload, so a watcher that ran then saw
// it live and owed it a rollout (WhyOwed). Such a check can be lost: adoption of a large
// install takes minutes, and a leader change drops the changes queued behind it; the new
// leader, which did not see them live, would otherwise record the new config as what the
// pods run. The rule keeps no state of its own (nothing to persist, nothing to lose with
// the lease), and a write before the coverage still rolls nothing, so installing
// configstamp still rolls nothing.
//
// A workload that runs no pods of its own (NoPods: a CronJob) is judged by its stamp
// alone, without evidence of times: no pod runs its template now (running Jobs have
// copies), so restamping it rolls nothing; installed over, suspended or not, it is
// stamped too, and its next run (a Job, stamped at its own CREATE as well) runs the
// config as it is then. Nothing is started for a change.
func ShouldRoll(in Input, ev Evidence) (Decision, error) {
	switch {
	case in.NoPods && in.Template.Annotations[stamp.HashAnnotation] == in.Want.Hash:
		return Decision{Action: Record, Why: WhyNextRun}, nil
	case in.NoPods:
		return Decision{Action: Roll, Why: WhyNextRun}, nil
	case in.Certain:
		return Decision{Action: Roll, Why: WhyCertain}, nil
	case in.ChangedLive:
		return Decision{Action: Roll, Why: WhyLive}, nil
	}
	var unknown []string
	if in.Basis == "" && !in.RollStale {
		c, err := ev.Coverage()
		switch {
		case errors.Is(err, ErrUnknown):
			unknown = append(unknown, EvidenceCoverage)
		case err != nil:
			return Decision{}, err
		case !c.Bypassed && c.Since.IsZero():
			return Decision{Action: Record, Why: WhyInstalledOver}, nil
		case !c.Bypassed:
			return installedOver(ev, WrittenAfter(c.Since))
		}
	}
	since, ok, err := ev.PodsSince()
	switch {
	case err != nil:
		return unread(err, EvidencePods, unknown...)
	case !ok:
		return Decision{Action: Record, Why: WhyPodsPending}, nil
	}
	newer, err := ev.ConfigNewer(since)
	switch {
	case err != nil:
		return unread(err, EvidenceConfig, unknown...)
	case !newer:
		return Decision{Action: Record, Why: WhyConfigOlder}, nil
	case len(unknown) > 0:
		// Rolls only if it bypassed the webhook, which is not known.
		return Decision{Action: Unknown, Why: WhyConfigNewer, Unknown: unknown}, nil
	}
	return Decision{Action: Roll, Why: WhyConfigNewer}, nil
}

// installedOver decides for an installed-over workload covered since before cut (the
// first second after its coverage): it rolls when a source was written at or after cut
// and at or after its pods began to be created. The sources are read first: in the
// common case (nothing written since the coverage) its pods are not looked up.
func installedOver(ev Evidence, cut time.Time) (Decision, error) {
	newer, err := ev.ConfigNewer(cut)
	switch {
	case err != nil:
		return unread(err, EvidenceConfig)
	case !newer:
		return Decision{Action: Record, Why: WhyInstalledOver}, nil
	}
	since, ok, err := ev.PodsSince()
	switch {
	case err != nil:
		return unread(err, EvidencePods)
	case !ok:
		return Decision{Action: Record, Why: WhyPodsPending}, nil
	}
	if since.After(cut) {
		// Written after the coverage, but maybe only before its pods began.
		newer, err = ev.ConfigNewer(since)
		switch {
		case err != nil:
			return unread(err, EvidenceConfig)
		case !newer:
			return Decision{Action: Record, Why: WhyConfigOlder}, nil
		}
	}
	return Decision{Action: Roll, Why: WhyOwed}, nil
}

// unread is the decision when the evidence which could not be read (err): Unknown,
// naming it after the evidence already unknown, for ErrUnknown; err itself otherwise.
func unread(err error, which string, unknown ...string) (Decision, error) {
	if errors.Is(err, ErrUnknown) {
		return Decision{Action: Unknown, Unknown: append(unknown, which)}, nil
	}
	return Decision{}, err
}

// RestartPlaceholder stands for the restart time the webhook would set (same length).
func RestartPlaceholder(restart bool) string {
	if !restart {
		return ""
	}
	return time.Time{}.UTC().Format(time.RFC3339)
}
