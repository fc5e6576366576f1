package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/bench"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/hashdoc"
	"github.com/configstamp/configstamp/webhook"
)

// verdict is the exactly-once check of every Deployment.
type verdict struct {
	deployments int
	edits       int // by the ConfigMaps' revisions
	tallyOff    int // ConfigMaps whose revision differs from the edits the editor counted
	// Deployments whose stamp (or, adopted and never edited, record) is not the hash of
	// their ConfigMap's content, whose generation is not what the edits and configstamp's
	// record writes account for, or that configstamp nudged other than once per edit.
	wrongHash, wrongGeneration, wrongNudges int
	// Deployments whose record configstamp wrote other than once if adopted, never if
	// stamped on creation (the webhook records each stamp): no rollout, not a violation.
	unexpectedRecords int
	// coalesced counts edits made again before configstamp nudged for them: one nudge
	// answered both (it lagged by more than the cooldown); the latest content landed.
	coalesced                      int
	nudges, records, failedPatches int // configstamp's PATCHes of the Deployments
	latency                        latency
	problems                       []string
}

// edits is how many edits a ConfigMap has had: its revision.
func edits(cm *corev1.ConfigMap) (int, error) {
	if cm == nil {
		return 0, fmt.Errorf("ConfigMap missing")
	}
	n, err := strconv.Atoi(cm.Data[revisionKey])
	if err != nil {
		return 0, fmt.Errorf("ConfigMap revision %q", cm.Data[revisionKey])
	}
	return n, nil
}

// stampProblem says what is wrong with a Deployment's stamp given its ConfigMap ("":
// nothing). It must be the hash of the ConfigMap's content as docs/hash.md computes it,
// independently of configstamp's code; an adopted Deployment never edited carries no
// stamp: its record must hold that hash.
func stampProblem(cm *corev1.ConfigMap, d *appsv1.Deployment) string {
	n, err := edits(cm)
	if err != nil {
		return err.Error()
	}
	if d == nil {
		return "Deployment missing"
	}
	want := hashdoc.Hash([]hashdoc.Source{{Name: cm.Name}}, func(string) *corev1.ConfigMap { return cm })
	got := d.Spec.Template.Annotations[stamp.HashAnnotation]
	switch {
	case got == "" && n > 0:
		return fmt.Sprintf("not stamped after %d edits", n)
	case got == "":
		if rec, ok := stamp.ParseObserved(d.Annotations[stamp.ObservedAnnotation]); !ok || rec.Hash != want {
			return fmt.Sprintf("unstamped, record %q, want hash %s", d.Annotations[stamp.ObservedAnnotation], short(want))
		}
	case got != want:
		return fmt.Sprintf("stamp %s, want %s (revision %d)", short(got), short(want), n)
	}
	return ""
}

// settle waits until every Deployment carries the stamp of its ConfigMap's content and
// has moved its generation at least once per edit (up to ten minutes), then for quiet
// more, in which a late second nudge would still show.
func settle(ctx context.Context, cs kubernetes.Interface, objs []object, quiet time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		cms, err := configMaps(ctx, cs, objs)
		if err != nil {
			return 0, err
		}
		deps, err := deployments(ctx, cs, objs)
		if err != nil {
			return 0, err
		}
		behind := 0
		for _, o := range objs {
			cm, d := cms[o.configMapKey()], deps[o.key()]
			n, _ := edits(cm)
			if stampProblem(cm, d) != "" || d.Generation < int64(1+n) {
				behind++
			}
		}
		took := time.Since(start)
		fmt.Printf("  %s: %d Deployments not current\n", took.Round(time.Second), behind)
		if behind == 0 || took > 10*time.Minute {
			fmt.Printf("  %s quiet before the check\n", quiet)
			time.Sleep(quiet)
			return took, nil
		}
		time.Sleep(5 * time.Second)
	}
}

// check judges every Deployment, with configstamp's PATCHes of each counted in the
// audit log from mark (configstamp's start). A nudge is a PATCH through which the
// webhook computed a stamp: the API server logs the webhook's config-hash audit
// annotation with it. configstamp's other PATCH of a Deployment, the write of its
// record, is admitted without one (the webhook only strips the marker). Failed PATCHes
// count apart. A Deployment's generation moves with its spec and with its metadata
// annotations (the API server's Deployment strategy: annotations are copied to
// ReplicaSets), so it is 1 + one per edit (the nudge stamps the template) + one per
// record write; with replicas 0 nothing else writes it.
func check(ctx context.Context, cs kubernetes.Interface, auditLog string, mark bench.AuditMark, objs []object, tally []int) (verdict, error) {
	v := verdict{deployments: len(objs)}
	cms, err := configMaps(ctx, cs, objs)
	if err != nil {
		return v, err
	}
	deps, err := deployments(ctx, cs, objs)
	if err != nil {
		return v, err
	}
	records := map[string]int{}
	edited, nudged := map[string][]time.Time{}, map[string][]time.Time{} // by ConfigMap, by Deployment
	err = bench.ReadAudit(auditLog, mark, func(ev *bench.AuditEvent) {
		if ev.Verb != "patch" || ev.Stage != "ResponseComplete" || ev.ResponseStatus == nil {
			return
		}
		key := ev.ObjectRef.Namespace + "/" + ev.ObjectRef.Name
		ok := ev.ResponseStatus.Code/100 == 2
		if ev.User.Username == cluster.AdminUser && ev.ObjectRef.Resource == "configmaps" && ok {
			edited[key] = append(edited[key], ev.StageTimestamp)
		}
		if ev.User.Username != cluster.ConfigstampUser || ev.ObjectRef.Resource != "deployments" {
			return
		}
		switch {
		case !ok:
			v.failedPatches++
		case stamped(ev.Annotations):
			v.nudges++
			nudged[key] = append(nudged[key], ev.StageTimestamp)
		default:
			v.records++
			records[key]++
		}
	})
	if err != nil {
		return v, err
	}
	for i, o := range objs {
		cm, d := cms[o.configMapKey()], deps[o.key()]
		n, err := edits(cm)
		if err != nil || d == nil {
			v.problems = append(v.problems, fmt.Sprintf("%s: %v; Deployment present: %v", o.key(), err, d != nil))
			continue
		}
		v.edits += n
		if n != tally[i] {
			v.tallyOff++
		}
		wantRecords := 0
		if o.adopted {
			wantRecords = 1
		}
		if records[o.key()] != wantRecords {
			v.unexpectedRecords++
		}
		var wrong []string
		if p := stampProblem(cm, d); p != "" {
			v.wrongHash++
			wrong = append(wrong, p)
		}
		nudges := len(nudged[o.key()])
		if want := int64(1 + nudges + records[o.key()]); d.Generation != want {
			v.wrongGeneration++
			wrong = append(wrong, fmt.Sprintf("generation %d, want %d (1 + nudges + record writes)", d.Generation, want))
		}
		merged := coalesced(edited[o.configMapKey()], nudged[o.key()])
		switch {
		case nudges > n:
			v.wrongNudges++
			wrong = append(wrong, "nudged more than once for an edit")
		case nudges+merged == n && merged > 0:
			v.coalesced += merged
		case nudges != n:
			v.wrongNudges++
			wrong = append(wrong, "an edit not nudged")
		}
		if len(wrong) > 0 {
			v.problems = append(v.problems, fmt.Sprintf("%s (adopted %v): %s; %d edits, %d nudges, %d record writes", o.key(), o.adopted,
				strings.Join(wrong, "; "), n, len(nudged[o.key()]), records[o.key()]))
		}
	}
	v.latency = measureLatency(objs, edited, nudged)
	return v, nil
}

// coalesced counts the edits followed by another edit of the same ConfigMap before any
// nudge of its Deployment (times in the audit log's order).
func coalesced(edits, nudges []time.Time) int {
	n := 0
	for k := 0; k+1 < len(edits); k++ {
		answered := false
		for _, t := range nudges {
			if t.After(edits[k]) && !t.After(edits[k+1]) {
				answered = true
				break
			}
		}
		if !answered {
			n++
		}
	}
	return n
}

// stamped reports whether an audit event carries configstamp's config-hash audit
// annotation (keyed by whichever webhook entry name configstamp registered).
func stamped(annotations map[string]string) bool {
	for k := range annotations {
		if strings.HasSuffix(k, "/"+webhook.AuditHash) {
			return true
		}
	}
	return false
}

// requestsSince counts configstamp's requests after mark, by "verb resource".
func requestsSince(path string, mark bench.AuditMark) (map[string]int, error) {
	return bench.Requests(path, mark, cluster.ConfigstampUser)
}

// panicLine matches what a Go panic, or controller-runtime's recovery of one, prints.
var panicLine = regexp.MustCompile(`(?i)\bpanic(ked)?\b|Observed a panic|goroutine \d+ \[running\]`)

// panics are the lines of configstamp's output that show a panic.
func panics(output string) []string {
	var out []string
	for _, line := range strings.Split(output, "\n") {
		if panicLine.MatchString(line) {
			out = append(out, line)
		}
	}
	return out
}

// starts counts "Starting configstamp" records: more than one is a restart in place.
func starts(logs []map[string]any) int {
	n := 0
	for _, rec := range logs {
		if rec["msg"] == "Starting configstamp" {
			n++
		}
	}
	return n
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
