package webhook

import (
	"fmt"
	"regexp"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// MatchConditionName names the registration's one match condition.
const MatchConditionName = "configstamp-relevant-change"

// annotationPrefix starts every annotation configstamp reads or writes on a workload's
// metadata (its record, the nudge, skip, extra-sources).
const annotationPrefix = "configstamp.io/"

// MatchConditions are the match conditions of k's registration entries: the API server
// calls configstamp for a CREATE, and for an UPDATE that carries the watcher's marker
// (a nudge or a record; also when an earlier nudge's marker was left in place by an
// outage, so the retry's patch changes nothing), or adds, removes or changes the pod
// template, any configstamp.io/ annotation of the workload's metadata or the opt-in
// label. Other UPDATEs (labels,
// replicas, paused, a release re-applying an unchanged template) cost no call and no read:
// the webhook has nothing to do for them but restamp a workload whose config changed since,
// and that is the watcher's to roll, after the debounce, as for every other change. An
// evaluation error skips the call (failurePolicy Ignore): the watcher heals what is missed.
// The chart renders the same expression (test/deploy compares them).
func MatchConditions(k *workload.Kind, label string) []admissionregistrationv1.MatchCondition {
	expr := strings.Join([]string{
		"request.operation != 'UPDATE'",
		carries(stamp.NudgeAnnotation),
		templateChanged(k.TemplatePath()),
		annotationsChanged(annotationPrefix),
		labelChanged(label),
	}, " || ")
	return []admissionregistrationv1.MatchCondition{{Name: MatchConditionName, Expression: expr}}
}

// celField is a path segment that CEL's field selection takes as it is.
var celField = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// templateChanged is true when the object at pointer (e.g. /spec/template) is present in
// one of object and oldObject and not the other, or differs between them.
func templateChanged(pointer string) string {
	segs := strings.Split(strings.TrimPrefix(pointer, "/"), "/")
	for _, s := range segs {
		if !celField.MatchString(s) {
			panic(fmt.Sprintf("template path %q: segment %q is not a CEL field name", pointer, s))
		}
	}
	present := func(root string) string {
		var has []string
		for i := range segs {
			has = append(has, "has("+root+"."+strings.Join(segs[:i+1], ".")+")")
		}
		return "(" + strings.Join(has, " && ") + ")"
	}
	field := strings.Join(segs, ".")
	return fmt.Sprintf("%[1]s != %[2]s || (%[1]s && object.%[3]s != oldObject.%[3]s)", present("object"), present("oldObject"), field)
}

// annotationsChanged is true when an annotation whose key starts with prefix was added,
// changed or removed.
func annotationsChanged(prefix string) string {
	const n, o = "object.metadata.annotations", "oldObject.metadata.annotations"
	return fmt.Sprintf("(has(%[1]s) && %[1]s.exists(k, k.startsWith('%[3]s') && (!has(%[2]s) || !(k in %[2]s) || %[2]s[k] != %[1]s[k])))"+
		" || (has(%[2]s) && %[2]s.exists(k, k.startsWith('%[3]s') && (!has(%[1]s) || !(k in %[1]s))))", n, o, prefix)
}

// carries is true when the new object has the metadata annotation key.
func carries(key string) string {
	return fmt.Sprintf("(has(object.metadata.annotations) && '%s' in object.metadata.annotations)", key)
}

// labelChanged is true when the label key was added, changed or removed.
func labelChanged(key string) string {
	value := func(labels string) string {
		return fmt.Sprintf("(has(%[1]s) && '%[2]s' in %[1]s ? %[1]s['%[2]s'] : '')", labels, key)
	}
	return value("object.metadata.labels") + " != " + value("oldObject.metadata.labels")
}
