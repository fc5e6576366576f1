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

// WorkloadAnnotations are the annotations of a workload's metadata that configstamp reads
// or writes: a change of any of them is the webhook's to see.
var WorkloadAnnotations = []string{stamp.NudgeAnnotation, stamp.ObservedAnnotation, stamp.SkipAnnotation, stamp.ExtraSourcesAnnotation}

// MatchConditions are the match conditions of k's registration entries: the API server
// calls configstamp for a CREATE, and for an UPDATE that carries the watcher's marker
// (a nudge or a record; also when an earlier nudge's marker was left in place by an
// outage, so the retry's patch changes nothing), adds, removes or changes the pod
// template, one of WorkloadAnnotations or the opt-in label, or resumes a paused workload
// (the webhook stamps the config current then, in the write that rolls it). Other UPDATEs
// (labels, replicas, other annotations, a release re-applying an unchanged template) cost
// no call and no read: the webhook would have nothing to do for them but restamp config
// that changed since, and that is the watcher's to roll after the debounce. An evaluation
// error skips the call (failurePolicy Ignore): the watcher heals what is missed. Each
// annotation is looked up by its key, so the cost does not grow with the workload's
// annotations. The chart renders the same expression (test/deploy compares them).
func MatchConditions(k *workload.Kind, label string) []admissionregistrationv1.MatchCondition {
	parts := []string{
		"request.operation != 'UPDATE'",
		fmt.Sprintf("(has(object.metadata.annotations) && '%s' in object.metadata.annotations)", stamp.NudgeAnnotation),
		templateChanged(k.TemplatePath()),
	}
	for _, key := range WorkloadAnnotations {
		parts = append(parts, keyChanged("metadata.annotations", key))
	}
	parts = append(parts, keyChanged("metadata.labels", label))
	if p := k.PausedPath(); p != "" {
		parts = append(parts, resumed(p))
	}
	return []admissionregistrationv1.MatchCondition{{Name: MatchConditionName, Expression: strings.Join(parts, " || ")}}
}

// celField is a path segment that CEL's field selection takes as it is.
var celField = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// fields splits a JSON pointer (e.g. /spec/template) into CEL field names.
func fields(pointer string) []string {
	segs := strings.Split(strings.TrimPrefix(pointer, "/"), "/")
	for _, s := range segs {
		if !celField.MatchString(s) {
			panic(fmt.Sprintf("path %q: segment %q is not a CEL field name", pointer, s))
		}
	}
	return segs
}

// present is true when root has every field down to segs.
func present(root string, segs []string) string {
	var has []string
	for i := range segs {
		has = append(has, "has("+root+"."+strings.Join(segs[:i+1], ".")+")")
	}
	return "(" + strings.Join(has, " && ") + ")"
}

// templateChanged is true when the object at pointer is present in one of object and
// oldObject and not the other, or differs between them.
func templateChanged(pointer string) string {
	segs := fields(pointer)
	field := strings.Join(segs, ".")
	return fmt.Sprintf("%[1]s != %[2]s || (%[1]s && object.%[3]s != oldObject.%[3]s)", present("object", segs), present("oldObject", segs), field)
}

// keyChanged is true when the key of the map at field (metadata.labels or
// metadata.annotations) was added, removed or changed.
func keyChanged(field, key string) string {
	in := func(root string) string {
		return fmt.Sprintf("(has(%[1]s.%[2]s) && '%[3]s' in %[1]s.%[2]s)", root, field, key)
	}
	return fmt.Sprintf("%[1]s != %[2]s || (%[1]s && %[2]s && object.%[3]s['%[4]s'] != oldObject.%[3]s['%[4]s'])", in("object"), in("oldObject"), field, key)
}

// resumed is true when the boolean at pointer (spec.paused) was true and is not now.
func resumed(pointer string) string {
	segs := fields(pointer)
	field := strings.Join(segs, ".")
	return fmt.Sprintf("(%[1]s && oldObject.%[3]s == true) && !(%[2]s && object.%[3]s == true)", present("oldObject", segs), present("object", segs), field)
}
