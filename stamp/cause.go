package stamp

import (
	"fmt"
	"strings"
)

// ChangeCauseAnnotation is the workload annotation `kubectl rollout history` shows for a
// revision: the Deployment controller copies a Deployment's annotations to the
// ReplicaSet of the rollout. The webhook sets it on the rollouts configstamp causes (a
// nudge) and removes a cause of its own from someone else's rollout.
const ChangeCauseAnnotation = "kubernetes.io/change-cause"

// causePrefix starts every change cause configstamp writes.
const causePrefix = "configstamp: "

// IsOwnChangeCause reports whether a change cause is one configstamp wrote.
func IsOwnChangeCause(v string) bool { return strings.HasPrefix(v, causePrefix) }

// ChangedSources lists the sources ("kind/name") whose digest differs between two
// sources annotations (SourcesAnnotation), in the order of after, then those dropped.
func ChangedSources(before, after string) []string {
	b, a := ParseSources(before), ParseSources(after)
	var out []string
	for _, e := range strings.Split(after, ",") {
		k, _, _ := strings.Cut(e, "=")
		if k != "" && b[k] != a[k] {
			out = append(out, k)
		}
	}
	for _, e := range strings.Split(before, ",") {
		k, _, _ := strings.Cut(e, "=")
		if _, still := a[k]; k != "" && !still {
			out = append(out, k)
		}
	}
	return out
}

// ChangeCause describes a rollout configstamp causes, from the sources annotations of
// the stamp before and after: each source that changed with its old and new digest
// ("none": not consumed before, or no longer).
func ChangeCause(before, after string) string {
	b, a := ParseSources(before), ParseSources(after)
	var parts []string
	for _, src := range ChangedSources(before, after) {
		parts = append(parts, fmt.Sprintf("%s changed (digest %s -> %s)", src, orNone(b[src]), orNone(a[src])))
	}
	if len(parts) == 0 {
		// The stamp is unchanged: the pods ran other config than it says (the
		// template was changed while the webhook was bypassed) and are restarted.
		return causePrefix + "pods restarted onto the config their stamp names"
	}
	return causePrefix + strings.Join(parts, "; ")
}

func orNone(d string) string {
	if d == "" {
		return "none"
	}
	return d
}
