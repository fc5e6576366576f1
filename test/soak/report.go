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

	nudgesTotal    float64 // configstamp_nudges_total at the end (configstamp's nudges since it started)
	nudgesTotalErr error
	alive          bool
	panics         []string
	starts         int
}

// failed reports an exactly-once violation, a run that proved nothing, a panic or a
// restart: the soak exits non-zero. Suspected leaks are reported, not failed.
func (r *results) failed() bool {
	return len(r.check.problems) > 0 || len(r.runProblems()) > 0 || len(r.panics) > 0 || r.restarted()
}

// runProblems are what makes the run as a whole fail, apart from the Deployments'
// violations: a run that checked nothing or less than it claims, and audit-log evidence
// that contradicts configstamp's own count.
func (r *results) runProblems() []string {
	var out []string
	e, v := r.editing, r.check
	if e.made == 0 {
		out = append(out, "no edits made: nothing was checked")
	}
	if e.failed > 0 {
		out = append(out, fmt.Sprintf("%d edits failed: what the ConfigMaps owe is uncertain", e.failed))
	}
	if v.tallyOff > 0 {
		out = append(out, fmt.Sprintf("%d ConfigMaps' revisions differ from the edits the editor counted", v.tallyOff))
	}
	if v.edits != e.made {
		out = append(out, fmt.Sprintf("the ConfigMaps' revisions add up to %d edits, the editor made %d", v.edits, e.made))
	}
	if len(v.unclassified) > 0 {
		out = append(out, fmt.Sprintf("%d PATCHes of Deployments by configstamp neither a nudge nor a record write by their body (audit level Request missing?), the first: %s",
			len(v.unclassified), v.unclassified[0]))
	}
	if v.failedOpen > 0 {
		out = append(out, fmt.Sprintf("%d PATCHes of Deployments by configstamp admitted with its webhook failed open", v.failedOpen))
	}
	if v.unstampedNudges > 0 {
		out = append(out, fmt.Sprintf("%d nudges admitted without the webhook stamping them (its config-hash audit annotation and the API server's mutation annotation with mutated true)", v.unstampedNudges))
	}
	switch {
	case r.nudgesTotalErr != nil:
		out = append(out, fmt.Sprintf("configstamp_nudges_total not read: %v", r.nudgesTotalErr))
	case r.nudgesTotal != float64(v.nudges):
		out = append(out, fmt.Sprintf("the audit log shows %d nudges since configstamp started, configstamp_nudges_total %.0f", v.nudges, r.nudgesTotal))
	}
	return out
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
	row("edit to nudge (audit log: each nudge of a Deployment from the latest edit of its ConfigMap before it; includes the debounce)", r.check.latency.String())
	row("every Deployment current after the last edit", r.current.Round(time.Second).String())
	v := r.check
	row("stamp = hash of the ConfigMap's content (docs/hash.md), and the record holds that hash; an adopted Deployment never edited carries no stamp, only the record", count(v.deployments-v.wrongHash, v.deployments))
	row("edit windows (an edit of a ConfigMap to its next edit, or to the check) with exactly one nudge of its Deployment (audit: configstamp's PATCHes whose body sets the marker to \"true\")",
		fmt.Sprintf("%d of %d; with two or more: %d; empty, configstamp shown behind (excused): %d; empty, not shown behind (lost): %d", v.windowsOne, v.edits, v.windowsDouble, v.windowsExcused, v.windowsLost))
	row("Deployments with every window right and no nudge outside one", count(v.deployments-v.wrongNudges, v.deployments))
	row("generation = 1 + nudges + configstamp's record writes (each nudge one template change; a Deployment's generation moves with its annotations too; nothing else wrote it)", count(v.deployments-v.wrongGeneration, v.deployments))
	row("record writes (body: marker \"record\") to edited Deployments during the edits", fmt.Sprint(v.editPhaseRecords))
	row("configstamp's PATCHes of Deployments: nudges / record writes / failed nudges / failed record writes / neither by their body", fmt.Sprintf("%d / %d / %d / %d / %d",
		v.nudges, v.records, v.failedNudges, v.failedRecords, len(v.unclassified)))
	nudgesTotal := fmt.Sprintf("%.0f", r.nudgesTotal)
	if r.nudgesTotalErr != nil {
		nudgesTotal = "not read"
	}
	row("nudges in the audit log since configstamp started = configstamp_nudges_total", fmt.Sprintf("%d, %s", v.nudges, nudgesTotal))
	row("of those PATCHes: admitted with a webhook failed open; nudges the webhook did not stamp (no config-hash audit annotation, or no mutation annotation with mutated true)", fmt.Sprintf("%d; %d", v.failedOpen, v.unstampedNudges))
	row("edits by the ConfigMaps' revisions; ConfigMaps whose revision differs from the edits counted", fmt.Sprintf("%d; %d", v.edits, v.tallyOff))
	row("record written once on each adopted Deployment, never on one stamped on creation (reported: no rollout either way)", count(v.deployments-v.unexpectedRecords, v.deployments))
	row("panics in configstamp's output", lines(r.panics))
	restarts := fmt.Sprintf("none (pid %d ran throughout)", r.pid)
	if r.restarted() {
		restarts = fmt.Sprintf("RESTARTED (alive at the end: %v; \"Starting configstamp\" logged %d times)", r.alive, r.starts)
	}
	row("process restarts", restarts)
	run := r.runProblems()
	verdict := "exactly once: every edit one nudge, none lost, none doubled"
	switch {
	case len(v.problems) > 0 && len(run) > 0:
		verdict = fmt.Sprintf("VIOLATED for %d Deployments; RUN FAILED: %s", len(v.problems), strings.Join(run, "; "))
	case len(v.problems) > 0:
		verdict = fmt.Sprintf("VIOLATED for %d Deployments", len(v.problems))
	case len(run) > 0:
		verdict = "RUN FAILED: " + strings.Join(run, "; ")
	}
	row("verdict", verdict)

	fmt.Fprintf(&b, "\nResources, sampled every %s over the edits; slopes are least-squares fits to the samples after the first %s (%d samples); a slope above %.0f%% of the mean per hour (and above a floor of 1 MiB or 5 per hour) is a suspected leak.\n\n",
		cfg.every, cfg.warmup, len(r.samples), cfg.tolerance)
	b.WriteString("| resource | min | max | first | last | slope per hour | reported above (per hour; over the judged window) | samples (not read) | |\n|---|---|---|---|---|---|---|---|---|\n")
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
		limit := fmt.Sprintf("%.1f; %.2f", t.tolerancePerH, t.tolerancePerH*t.window.Hours())
		if t.bytes {
			per = fmt.Sprintf("%+.1f MiB", t.perHour/(1<<20))
			limit = fmt.Sprintf("%.1f MiB; %.2f MiB", t.tolerancePerH/(1<<20), t.tolerancePerH*t.window.Hours()/(1<<20))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %d (%d) | %s |\n", t.name, f(t.min), f(t.max), f(t.first), f(t.last), per, limit, t.samples, t.missing, flag)
	}
	list(&b, "The run failed", run, len(run))
	list(&b, "Exactly-once violations (the first 50 Deployments)", v.problems, 50)
	list(&b, "Empty edit windows excused (configstamp shown behind), the first 20", v.excused, 20)
	return b.String()
}

// list writes a titled bullet list of the first most items (nothing when empty).
func list(b *strings.Builder, title string, items []string, most int) {
	if len(items) == 0 {
		return
	}
	fmt.Fprintf(b, "\n%s:\n\n", title)
	for _, x := range items[:min(most, len(items))] {
		fmt.Fprintf(b, "- %s\n", x)
	}
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
