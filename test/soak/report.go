package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/configstamp/configstamp/test/bench"
)

// results is everything the soak measured.
type results struct {
	objects  []object
	pid      int
	adoption time.Duration // until every adopted Deployment had its record
	idle     time.Duration // from the second half's creation until configstamp was idle
	editing  editing
	edits    []int // per object, as the editor counted them
	samples  []sample
	current  time.Duration // from the last edit until every Deployment was current
	requests map[string]int
	check    verdict

	nudgesTotal float64 // configstamp_nudges_total at the end
	alive       bool
	panics      []string
	starts      int
}

// failed reports an exactly-once violation, a panic or a restart: the soak exits
// non-zero. Suspected leaks are reported, not failed.
func (r *results) failed() bool {
	return len(r.check.problems) > 0 || len(r.panics) > 0 || r.restarted()
}

// restarted reports whether configstamp did not run as one process throughout.
func (r *results) restarted() bool {
	if !r.alive || r.starts != 1 {
		return true
	}
	for _, x := range r.samples {
		if !x.alive {
			return true
		}
	}
	return false
}

// summary is the soak's markdown report.
func (r *results) summary(cfg config) string {
	var b strings.Builder
	n := len(r.objects)
	half := n / 2
	row := func(name, value string) { fmt.Fprintf(&b, "| %s | %s |\n", name, value) }
	b.WriteString("| measurement | result |\n|---|---|\n")
	row("objects", fmt.Sprintf("%d ConfigMaps (1 KiB) and %d Deployments (replicas 0, one ConfigMap each through a volume) in %d namespaces; %d created before configstamp started (adopted), %d after (stamped on creation)",
		n, n, cfg.namespaces, half, n-half))
	row("adoption: every Deployment present at start recorded", r.adoption.Round(time.Second).String())
	row("the second half created: configstamp idle again (dependents of every new ConfigMap checked) after", r.idle.Round(time.Second).String())
	e := r.editing
	row("edits", fmt.Sprintf("%d in %s (%.2f/s, asked %.2f/s), each to a ConfigMap not edited in the last %s; %d failed, %d ticks skipped (no ConfigMap out of its cooldown)",
		e.made, e.took.Round(time.Second), float64(e.made)/e.took.Seconds(), cfg.rate, cfg.cooldown, e.failed, e.skipped))
	row("configstamp's requests from the first edit to the check", bench.FormatRequests(r.requests))
	if e.made > 0 {
		total := 0
		for _, c := range r.requests {
			total += c
		}
		row("configstamp's requests per edit", fmt.Sprintf("%.2f", float64(total)/float64(e.made)))
	}
	row("edit to nudge (audit log: the ConfigMap's PATCH to configstamp's PATCH of its Deployment; includes the debounce)", r.check.latency.String())
	row("every Deployment current after the last edit", r.current.Round(time.Second).String())
	v := r.check
	row("stamp (or record, adopted and never edited) = hash of the ConfigMap's content (docs/hash.md)", count(v.deployments-v.wrongHash, v.deployments))
	row("nudges (audit: configstamp's PATCHes with the config-hash annotation) = edits, per Deployment (no second nudge, none missing)", count(v.deployments-v.wrongNudges, v.deployments))
	row("generation = 1 + nudges + configstamp's record writes (each nudge one template change; a Deployment's generation moves with its annotations too; nothing else wrote it)", count(v.deployments-v.wrongGeneration, v.deployments))
	row("edits answered together with the next edit of their ConfigMap (configstamp lagged by more than the cooldown; the latest content landed; not a violation)", fmt.Sprint(v.coalesced))
	row("configstamp's PATCHes of Deployments: nudges / record writes / failed", fmt.Sprintf("%d / %d / %d (edits by the ConfigMaps' revisions: %d; configstamp_nudges_total: %.0f)",
		v.nudges, v.records, v.failedPatches, v.edits, r.nudgesTotal))
	row("record written once on each adopted Deployment, never on one stamped on creation (no rollout either way)", count(v.deployments-v.unexpectedRecords, v.deployments))
	if v.tallyOff > 0 {
		row("ConfigMaps whose revision differs from the edits counted (a failed edit that landed)", fmt.Sprint(v.tallyOff))
	}
	row("panics in configstamp's output", lines(r.panics))
	restarts := fmt.Sprintf("none (pid %d ran throughout)", r.pid)
	if r.restarted() {
		restarts = fmt.Sprintf("RESTARTED (alive at the end: %v; \"Starting configstamp\" logged %d times)", r.alive, r.starts)
	}
	row("process restarts", restarts)
	verdict := "exactly once: every edit one rollout and one nudge"
	if len(v.problems) > 0 {
		verdict = fmt.Sprintf("VIOLATED for %d Deployments", len(v.problems))
	}
	row("verdict", verdict)

	fmt.Fprintf(&b, "\nResources, sampled every %s over the edits; slopes are least-squares fits to the samples after the first %s (%d samples); a slope above %.0f%% of the mean per hour (and above a floor of 1 MiB or 5 per hour) is a suspected leak.\n\n",
		cfg.every, cfg.warmup, len(r.samples), cfg.tolerance)
	b.WriteString("| resource | min | max | first | last | slope per hour | |\n|---|---|---|---|---|---|---|\n")
	for _, t := range trends(r.samples, cfg.warmup, cfg.tolerance) {
		flag := "no leak seen"
		if t.suspected {
			flag = "SUSPECTED LEAK"
		}
		switch {
		case t.samples < 3:
			flag = "too few samples"
		case t.window < minWindow:
			flag = fmt.Sprintf("not judged: %s of samples, under %s", t.window.Round(time.Second), minWindow)
		}
		f := func(x float64) string {
			if t.bytes {
				return bench.MiB(int64(x))
			}
			return fmt.Sprintf("%.0f", x)
		}
		per := fmt.Sprintf("%+.1f", t.perHour)
		if t.bytes {
			per = fmt.Sprintf("%+.1f MiB", t.perHour/(1<<20))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", t.name, f(t.min), f(t.max), f(t.first), f(t.last), per, flag)
	}
	if len(v.problems) > 0 {
		b.WriteString("\nExactly-once violations (the first 50):\n\n")
		for i, p := range v.problems {
			if i == 50 {
				break
			}
			fmt.Fprintf(&b, "- %s\n", p)
		}
	}
	return b.String()
}

func count(ok, of int) string {
	if ok == of {
		return fmt.Sprintf("%d of %d", ok, of)
	}
	return fmt.Sprintf("%d of %d (%d WRONG)", ok, of, of-ok)
}

func lines(ls []string) string {
	if len(ls) == 0 {
		return "none"
	}
	first := strings.ReplaceAll(ls[0], "|", "\\|")
	if len(first) > 200 {
		first = first[:200]
	}
	return fmt.Sprintf("%d lines, the first: `%s`", len(ls), first)
}
