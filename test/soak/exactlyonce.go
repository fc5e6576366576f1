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
	// their ConfigMap's content, whose generation is not 1 + edits, or that configstamp
	// nudged other than once per edit.
	wrongHash, wrongGeneration, wrongNudges int
	nudges, records, failedPatches          int // configstamp's PATCHes of the Deployments
	problems                                []string
}

// judge says what is wrong with one Deployment given its ConfigMap (nothing: nil).
// Its stamp must be the hash of the ConfigMap's content as docs/hash.md computes it
// (an adopted Deployment never edited carries no stamp: its record must hold that hash),
// and its generation 1 + the edits (replicas 0: only a template change moves it).
func judge(cm *corev1.ConfigMap, d *appsv1.Deployment) (hash, generation string) {
	if cm == nil || d == nil {
		return "missing", ""
	}
	edits, err := strconv.Atoi(cm.Data[revisionKey])
	if err != nil {
		return "ConfigMap revision " + cm.Data[revisionKey], ""
	}
	want := hashdoc.Hash([]hashdoc.Source{{Name: cm.Name}}, func(string) *corev1.ConfigMap { return cm })
	got := d.Spec.Template.Annotations[stamp.HashAnnotation]
	switch {
	case got == "" && edits > 0:
		hash = fmt.Sprintf("not stamped after %d edits", edits)
	case got == "":
		if rec, ok := stamp.ParseObserved(d.Annotations[stamp.ObservedAnnotation]); !ok || rec.Hash != want {
			hash = fmt.Sprintf("unstamped, record %q, want hash %s", d.Annotations[stamp.ObservedAnnotation], short(want))
		}
	case got != want:
		hash = fmt.Sprintf("stamp %s, want %s (revision %d)", short(got), short(want), edits)
	}
	if d.Generation != int64(1+edits) {
		generation = fmt.Sprintf("generation %d, want %d (1 + %d edits)", d.Generation, 1+edits, edits)
	}
	return hash, generation
}

// settle waits until every Deployment is current (stamp and generation; up to ten
// minutes), then for quiet more, in which a late second nudge would still show.
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
			if h, g := judge(cms[o.namespace+"/"+o.configMap], deps[o.key()]); h != "" || g != "" {
				behind++
			}
		}
		took := time.Since(start)
		if behind == 0 || took > 10*time.Minute {
			fmt.Printf("  %s: %d Deployments not current; %s quiet before the check\n", took.Round(time.Second), behind, quiet)
			time.Sleep(quiet)
			return took, nil
		}
		time.Sleep(5 * time.Second)
	}
}

// check judges every Deployment and counts configstamp's PATCHes of each in the audit
// log from mark (configstamp's start). A nudge is a PATCH through which the webhook
// computed a stamp: the API server logs the webhook's config-hash audit annotation with
// it. configstamp's other PATCH of a Deployment, the write of its record, is admitted
// without one (the webhook only strips the marker). Failed PATCHes count apart.
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
	nudges := map[string]int{}
	err = bench.ReadAudit(auditLog, mark, func(ev *bench.AuditEvent) {
		if ev.User.Username != cluster.ConfigstampUser || ev.Verb != "patch" || ev.ObjectRef.Resource != "deployments" ||
			ev.Stage != "ResponseComplete" || ev.ResponseStatus == nil {
			return
		}
		switch {
		case ev.ResponseStatus.Code/100 != 2:
			v.failedPatches++
		case stamped(ev.Annotations):
			v.nudges++
			nudges[ev.ObjectRef.Namespace+"/"+ev.ObjectRef.Name]++
		default:
			v.records++
		}
	})
	if err != nil {
		return v, err
	}
	for i, o := range objs {
		cm := cms[o.namespace+"/"+o.configMap]
		hash, generation := judge(cm, deps[o.key()])
		edits := 0
		if cm != nil {
			edits, _ = strconv.Atoi(cm.Data[revisionKey])
		}
		v.edits += edits
		if edits != tally[i] {
			v.tallyOff++
		}
		var wrong []string
		if hash != "" {
			v.wrongHash++
			wrong = append(wrong, hash)
		}
		if generation != "" {
			v.wrongGeneration++
			wrong = append(wrong, generation)
		}
		if n := nudges[o.key()]; n != edits {
			v.wrongNudges++
			wrong = append(wrong, fmt.Sprintf("%d nudges for %d edits", n, edits))
		}
		if len(wrong) > 0 {
			v.problems = append(v.problems, o.key()+": "+strings.Join(wrong, "; "))
		}
	}
	return v, nil
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
