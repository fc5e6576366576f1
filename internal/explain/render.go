package explain

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/configstamp/configstamp/stamp"
)

// WriteReport prints a report as a table.
func WriteReport(w io.Writer, r Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	printf(tw, "%s/%s in namespace %s\n", r.Kind, r.Name, r.Namespace)
	if r.TemplateOf != "" {
		printf(tw, "Template:\t%s's (spec.workloadRef): what follows is its report\n", r.TemplateOf)
	}
	printf(tw, "Verdict:\t%s\n", r.Verdict)
	printf(tw, "Why:\t%s\n", r.Reason)
	rolls := "no"
	if r.Roll {
		// The watcher's debounce and minimum interval between rollouts are its own
		// state: the rollout comes after them.
		rolls = "yes, once its sources are quiet (--debounce) and not sooner than --min-rollout-interval after its last rollout by configstamp"
	}
	printf(tw, "Rolls:\t%s\n", rolls)
	printf(tw, "Stamp:\t%s\n", or(r.Stamp.Hash, "none"))
	if r.Record != "" {
		printf(tw, "Record:\t%s\n", r.Record)
	}
	printf(tw, "Basis:\t%s\n", r.Basis)
	printf(tw, "Current:\t%s\n", or(r.Current.Hash, "not computed"))
	if e := r.Evidence; e != nil {
		at := func(t *time.Time) string {
			if t == nil {
				return "not known"
			}
			return t.UTC().Format(time.RFC3339)
		}
		printf(tw, "Pods since:\t%s\n", at(e.PodsSince))
		written := at(e.ConfigWritten)
		if e.ConfigDeleted {
			written += " (and a stamped source was deleted since)"
		}
		printf(tw, "Config written:\t%s\n", written)
		if e.CreatedCovered != nil {
			printf(tw, "Created after coverage:\t%s\n", yesNo(*e.CreatedCovered))
		}
		if e.CoveredSince != nil {
			printf(tw, "Covered since:\t%s\n", at(e.CoveredSince))
		}
	}
	for _, p := range r.Problems {
		printf(tw, "Ignored:\t%s: %s\n", stamp.ExtraSourcesAnnotation, p)
	}
	if len(r.Sources) > 0 {
		line(tw)
		if r.SourcesNote != "" {
			printf(tw, "Note: %s\n", r.SourcesNote)
		}
		line(tw, "SOURCE\tKEYS\tVIA\tOPTIONAL\tSTAMPED\tCURRENT\tSTATUS\tNOTE")
		for _, s := range r.Sources {
			printf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID(), keys(s.AllKeys, s.Keys), or(strings.Join(s.Via, ","), "-"),
				yesNo(s.Optional), or(s.Stamped, "-"), or(s.Current, "-"), s.Status, or(s.Note, "-"))
		}
	}
	line(tw)
	if len(r.Events) == 0 {
		line(tw, "Events:\tnone of configstamp's")
	} else {
		line(tw, "LAST SEEN\tTYPE\tREASON\tMESSAGE")
		for _, e := range r.Events {
			printf(tw, "%s\t%s\t%s\t%s\n", e.Time.UTC().Format(time.RFC3339), e.Type, e.Reason, e.Message)
		}
	}
	return tw.Flush()
}

// WriteImpact prints an impact report as a table.
func WriteImpact(w io.Writer, r ImpactReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	what := "a change of " + r.Kind + "/" + r.Name
	if r.Key != "" {
		what = "a change of key " + r.Key + " of " + r.Kind + "/" + r.Name
	}
	printf(tw, "%s in namespace %s\n", what, r.Namespace)
	if r.Ignored {
		printf(tw, "It is annotated configstamp.io/ignore=true: no change of it rolls anything.\n")
	}
	if len(r.Workloads) == 0 {
		line(tw, "No workload consumes it.")
		return tw.Flush()
	}
	writeWaves(tw, r.Waves)
	line(tw)
	line(tw, "WORKLOAD\tKEYS\tVIA\tOPTIONAL\tROLLS\tWHY")
	for _, c := range r.Workloads {
		printf(tw, "%s/%s\t%s\t%s\t%s\t%s\t%s\n", c.Kind, c.Name, keys(c.AllKeys, c.Keys), or(strings.Join(c.Via, ","), "-"),
			yesNo(c.Optional), yesNo(c.Roll), c.Reason)
	}
	return tw.Flush()
}

// WriteOffline prints offline stamps.
func WriteOffline(w io.Writer, stamps []OfflineStamp) error {
	for i, s := range stamps {
		if i > 0 {
			line(w)
		}
		printf(w, "%s/%s in namespace %s\n", s.Kind, s.Name, s.Namespace)
		if s.Skipped {
			line(w, "  skipped: annotated "+stamp.SkipAnnotation+"=true, the webhook leaves it unstamped")
			continue
		}
		if s.TooManySources {
			line(w, "  too many sources: past the cap (--max-sources), the webhook reads none and keeps the stamp as stored")
			continue
		}
		if s.Hash == "" {
			line(w, "  nothing to stamp: it consumes no (non-ignored) ConfigMap")
			continue
		}
		printf(w, "  configstamp.io/config-hash: %s\n", s.Hash)
		printf(w, "  configstamp.io/sources: %s\n", s.Sources)
		if len(s.NotInFiles) > 0 {
			printf(w, "  not in the files, hashed as missing: %s\n", strings.Join(s.NotInFiles, ", "))
		}
	}
	return nil
}

// printf and line write one line of a report and drop its write error: a report's
// errors are Flush's (a tabwriter's, which sees only the lines it buffers) or none
// (WriteOffline), as they always were.
func printf(w io.Writer, format string, a ...any) { _, _ = fmt.Fprintf(w, format, a...) }

func line(w io.Writer, a ...any) { _, _ = fmt.Fprintln(w, a...) }

func keys(all bool, ks []string) string {
	if all {
		return "(all)"
	}
	return strings.Join(ks, ",")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// writeWaves prints the waves a change rolls in (nothing when none).
func writeWaves(w io.Writer, p *WavesPlan) {
	if p == nil {
		return
	}
	sizes := make([]string, len(p.Sizes))
	for i, n := range p.Sizes {
		sizes[i] = fmt.Sprint(n)
	}
	canaries := "the first consumer as canary"
	if p.Canaries > 0 {
		canaries = fmt.Sprintf("%d canaries (configstamp.io/canary=true)", p.Canaries)
		if p.Canaries == 1 {
			canaries = "1 canary (configstamp.io/canary=true)"
		}
	}
	printf(w, "A change of it rolls its consumers in %d waves (docs/waves.md): %s first, then steps %s, the rest last; sizes %s.\n",
		len(p.Sizes), canaries, p.Steps, strings.Join(sizes, ", "))
	switch {
	case p.Halted != "":
		printf(w, "Its change %s is halted in wave %d: %s.\n", p.Change, p.Current, p.Halted)
	case p.Change != "" && p.Current <= len(p.Sizes):
		printf(w, "Its change %s is rolling: wave %d of %d.\n", p.Change, p.Current, len(p.Sizes))
	}
}
