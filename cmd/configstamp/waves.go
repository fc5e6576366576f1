package main

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/waves"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/watcher"
)

// wavesCmd is `configstamp halt|resume KIND/NAME`: it writes the command annotation on
// the source (docs/waves.md) with the user's own credentials, naming the change (--change,
// else the latest the watcher's Events on the source name).
func (c *cli) wavesCmd(verb, short string) *cobra.Command {
	var change string
	cmd := &cobra.Command{
		Use:   verb + " KIND/NAME",
		Short: short,
		Long: short + ". KIND is configmap (cm) or secret. The change is the one the watcher's latest RollingInWaves or RolloutHalted " +
			"Event on it names, else (resume) the one failures are recorded for (--change to name another); a new change of the source is not affected. Writes the annotation " +
			waves.CommandAnnotation + " with your own credentials (docs/waves.md).",
		Example:           "  configstamp " + verb + " -n shop configmap/shared",
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: completeKinds(sourceNames()...),
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		kind, name, err := parseSource(args)
		if err != nil {
			return err
		}
		ns, err := c.namespace()
		if err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		if change == "" {
			if change, err = latestChange(cmd.Context(), cl, ns, kind, name, verb == "resume"); err != nil {
				return err
			}
		}
		if verb == "resume" {
			// First the failures so far: the watcher's evaluation the command's write
			// starts sees them resumed; a later wave's failure halts the change again.
			n, err := resumeFailures(cmd.Context(), cl, ns, change)
			if err != nil {
				return err
			}
			_, _ = fmt.Fprintf(c.stdout, "failures passed: %d\n", n)
		}
		obj := stamp.SourceKindNamed(kind).NewMeta()
		obj.SetNamespace(ns)
		obj.SetName(name)
		if err := cl.Patch(cmd.Context(), obj, client.RawPatch(types.MergePatchType, waves.AnnotationPatch(waves.CommandAnnotation, verb+" "+change))); err != nil {
			return fmt.Errorf("%s %s/%s in %s: %w", verb, kind, name, ns, err)
		}
		_, _ = fmt.Fprintf(c.stdout, "%s: %s/%s change %s\n", map[string]string{"halt": "halted", "resume": "resumed"}[verb], kind, name, change)
		return nil
	}
	cmd.Flags().StringVar(&change, "change", "", "The change, as the Events name it (KIND/NAME=DIGEST).")
	return cmd
}

// failure is a record of a wave's failure on a workload.
type failure struct {
	obj    *metav1.PartialObjectMetadata
	id     string // kind/name
	change string
	// resumed: a user passed it.
	resumed bool
}

// failures are the waves' failure records on the workloads in ns (metadata only).
func failures(ctx context.Context, cl client.Client, ns string) ([]failure, error) {
	var out []failure
	for _, k := range append(workload.Watched(workload.Builtin()), workload.Rollout) {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(k.GVK().GroupVersion().WithKind(k.Kind + "List"))
		if err := cl.List(ctx, list, client.InNamespace(ns)); err != nil {
			if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
				continue // Argo Rollouts not installed
			}
			return nil, fmt.Errorf("list %s in %s: %w", k.Resource, ns, err)
		}
		for i := range list.Items {
			o := &list.Items[i]
			head, why, ok := strings.Cut(o.Annotations[waves.FailedAnnotation], ": ")
			_, change, found := strings.Cut(head, "@")
			if ok && found {
				out = append(out, failure{obj: o, id: strings.ToLower(k.Kind) + "/" + o.Name, change: change, resumed: why == "resumed"})
			}
		}
	}
	return out, nil
}

// resumeFailures marks the failures of change recorded on workloads in ns resumed
// (waves.FailedAnnotation), under the user's credentials, and says how many.
func resumeFailures(ctx context.Context, cl client.Client, ns, change string) (int, error) {
	all, err := failures(ctx, cl, ns)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, f := range all {
		if f.change != change || f.resumed {
			continue
		}
		if err := cl.Patch(ctx, f.obj, client.RawPatch(types.MergePatchType, waves.AnnotationPatch(waves.FailedAnnotation, waves.FailedRecord(f.id, change, "")))); err != nil {
			return n, fmt.Errorf("resume %s in %s: %w", f.id, ns, err)
		}
		n++
	}
	return n, nil
}

// changeRef finds a change named in an Event's note.
var changeRef = regexp.MustCompile(`\b[a-z]+/[a-z0-9.-]+=[0-9a-f]{12}\b`)

// latestChange is the change the newest RollingInWaves or RolloutHalted Event on the
// source names, by its first occurrence: a series of isomorphic Events (same object,
// reason and action) keeps the first one's note. Without one (Events expire, an hour by
// default), for a resume, the one change of the source failures are recorded for and
// not resumed.
func latestChange(ctx context.Context, cl client.Client, ns, kind, name string, recorded bool) (string, error) {
	var list eventsv1.EventList
	if err := cl.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return "", fmt.Errorf("list Events in %s: %w", ns, err)
	}
	k := stamp.SourceKindNamed(kind)
	var found []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == k.Kind && e.Regarding.Name == name &&
			(e.Reason == watcher.ReasonRollingInWaves || e.Reason == watcher.ReasonRolloutHalted) && changeRef.MatchString(e.Note) {
			found = append(found, e)
		}
	}
	if len(found) > 0 {
		first := func(e eventsv1.Event) int64 {
			if !e.EventTime.IsZero() {
				return e.EventTime.UnixNano()
			}
			return e.CreationTimestamp.UnixNano()
		}
		newest := slices.MaxFunc(found, func(a, b eventsv1.Event) int { return int(min(max(first(a)-first(b), -1), 1)) })
		return changeRef.FindString(newest.Note), nil
	}
	if recorded {
		all, err := failures(ctx, cl, ns)
		if err != nil {
			return "", err
		}
		var changes []string
		for _, f := range all {
			if !f.resumed && strings.HasPrefix(f.change, kind+"/"+name+"=") && !slices.Contains(changes, f.change) {
				changes = append(changes, f.change)
			}
		}
		switch len(changes) {
		case 1:
			return changes[0], nil
		case 0:
		default:
			slices.Sort(changes)
			return "", fmt.Errorf("failures of %s/%s are recorded for %d changes: name one with --change (%s)", kind, name, len(changes), strings.Join(changes, ", "))
		}
	}
	return "", fmt.Errorf("no change of %s/%s rolling in waves: no RollingInWaves or RolloutHalted Event on it (name one with --change)", kind, name)
}
