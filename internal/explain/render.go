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
	fmt.Fprintf(tw, "%s/%s in namespace %s\n", r.Kind, r.Name, r.Namespace)
	fmt.Fprintf(tw, "Verdict:\t%s\n", r.Verdict)
	fmt.Fprintf(tw, "Why:\t%s\n", r.Reason)
	rolls := "no"
	if r.Roll {
		// The watcher's debounce and minimum interval between rollouts are its own
		// state: the rollout comes after them.
		rolls = "yes, once its sources are quiet (--debounce) and not sooner than --min-rollout-interval after its last rollout by configstamp"
	}
	fmt.Fprintf(tw, "Rolls:\t%s\n", rolls)
	fmt.Fprintf(tw, "Stamp:\t%s\n", or(r.Stamp.Hash, "none"))
	if r.Record != "" {
		fmt.Fprintf(tw, "Record:\t%s\n", r.Record)
	}
	fmt.Fprintf(tw, "Basis:\t%s\n", r.Basis)
	fmt.Fprintf(tw, "Current:\t%s\n", or(r.Current.Hash, "not computed"))
	if e := r.Evidence; e != nil {
		at := func(t *time.Time) string {
			if t == nil {
				return "not known"
			}
			return t.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "Pods since:\t%s\n", at(e.PodsSince))
		written := at(e.ConfigWritten)
		if e.ConfigDeleted {
			written += " (and a stamped source was deleted since)"
		}
		fmt.Fprintf(tw, "Config written:\t%s\n", written)
		if e.CreatedCovered != nil {
			fmt.Fprintf(tw, "Created after coverage:\t%s\n", yesNo(*e.CreatedCovered))
		}
	}
	for _, p := range r.Problems {
		fmt.Fprintf(tw, "Ignored:\t%s: %s\n", stamp.ExtraSourcesAnnotation, p)
	}
	if len(r.Sources) > 0 {
		fmt.Fprintln(tw)
		if r.SourcesNote != "" {
			fmt.Fprintf(tw, "Note: %s\n", r.SourcesNote)
		}
		fmt.Fprintln(tw, "SOURCE\tKEYS\tVIA\tOPTIONAL\tSTAMPED\tCURRENT\tSTATUS\tNOTE")
		for _, s := range r.Sources {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID(), keys(s.AllKeys, s.Keys), or(strings.Join(s.Via, ","), "-"),
				yesNo(s.Optional), or(s.Stamped, "-"), or(s.Current, "-"), s.Status, or(s.Note, "-"))
		}
	}
	fmt.Fprintln(tw)
	if len(r.Events) == 0 {
		fmt.Fprintln(tw, "Events:\tnone of configstamp's")
	} else {
		fmt.Fprintln(tw, "LAST SEEN\tTYPE\tREASON\tMESSAGE")
		for _, e := range r.Events {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Time.UTC().Format(time.RFC3339), e.Type, e.Reason, e.Message)
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
	fmt.Fprintf(tw, "%s in namespace %s\n", what, r.Namespace)
	if r.Ignored {
		fmt.Fprintf(tw, "It is annotated configstamp.io/ignore=true: no change of it rolls anything.\n")
	}
	if len(r.Workloads) == 0 {
		fmt.Fprintln(tw, "No workload consumes it.")
		return tw.Flush()
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "WORKLOAD\tKEYS\tVIA\tOPTIONAL\tROLLS\tWHY")
	for _, c := range r.Workloads {
		fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\t%s\t%s\n", c.Kind, c.Name, keys(c.AllKeys, c.Keys), or(strings.Join(c.Via, ","), "-"),
			yesNo(c.Optional), yesNo(c.Roll), c.Reason)
	}
	return tw.Flush()
}

// WriteOffline prints offline stamps.
func WriteOffline(w io.Writer, stamps []OfflineStamp) error {
	for i, s := range stamps {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s/%s in namespace %s\n", s.Kind, s.Name, s.Namespace)
		if s.Skipped {
			fmt.Fprintln(w, "  skipped: annotated "+stamp.SkipAnnotation+"=true, the webhook leaves it unstamped")
			continue
		}
		if s.Hash == "" {
			fmt.Fprintln(w, "  nothing to stamp: it consumes no (non-ignored) ConfigMap")
			continue
		}
		fmt.Fprintf(w, "  configstamp.io/config-hash: %s\n", s.Hash)
		fmt.Fprintf(w, "  configstamp.io/sources: %s\n", s.Sources)
		if len(s.NotInFiles) > 0 {
			fmt.Fprintf(w, "  not in the files, hashed as missing: %s\n", strings.Join(s.NotInFiles, ", "))
		}
	}
	return nil
}

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
