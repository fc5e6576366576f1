package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/bench"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/hashdoc"
	"github.com/configstamp/configstamp/webhook"
)

// verdict is the exactly-once check of every Deployment.
type verdict struct {
	deployments int
	edits       int // by the ConfigMaps' revisions
	tallyOff    int // ConfigMaps whose revision differs from the edits the editor counted
	// Deployments whose stamp or record is wrong (see stampProblem), whose generation is not what configstamp's PATCHes
	// account for, or whose nudges are not one per edit window.
	wrongHash, wrongGeneration, wrongNudges int
	// Edit windows (from an edit of a ConfigMap to its next edit, or to the check) with
	// exactly one nudge of its Deployment, with none (excused: configstamp was shown to
	// be behind; lost: it was not), with more than one.
	windowsOne, windowsExcused, windowsLost, windowsDouble int
	excused                                                []string // what excused each empty window
	// Deployments whose record configstamp wrote other than once if adopted, never if
	// stamped on creation: reported (no rollout); one written to an edited Deployment
	// during the edits fails it (it judged the pods to run config they do not).
	unexpectedRecords, editPhaseRecords int
	// configstamp's PATCHes of the Deployments, classified by the marker in the request
	// body: "true" a nudge, "record" a record write; unclassified any other body (none
	// logged, another value): a violation, the check cannot tell what it was.
	nudges, records, failedNudges, failedRecords int
	unclassified                                 []string
	// Of those PATCHes: admitted with the webhook failed open (the API server's
	// failed-open.mutation.webhook.admission.k8s.io annotation), and nudges the webhook
	// did not stamp (see stamped). Violations.
	failedOpen, unstampedNudges int
	latency                     latency
	problems                    []string
}

// lagNeighbourhood is how close to an edit the edits of other ConfigMaps are made
// whose time to a nudge shows how far behind configstamp was when it was made.
const lagNeighbourhood = 10 * time.Second

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

// stampProblem says what is wrong with a Deployment's stamp and record given its
// ConfigMap ("": nothing). The hash wanted is the ConfigMap's content's as docs/hash.md
// computes it, independently of configstamp's code. An adopted Deployment whose
// ConfigMap was never edited carries no stamp at all (configstamp only records the
// config its pods run); every other carries the stamp of that hash. Every Deployment's
// record (the webhook records each stamp; configstamp recorded each adopted one) holds
// that hash.
func stampProblem(cm *corev1.ConfigMap, d *appsv1.Deployment, adopted bool) string {
	n, err := edits(cm)
	if err != nil {
		return err.Error()
	}
	if d == nil {
		return "Deployment missing"
	}
	want := hashdoc.Hash([]hashdoc.Source{{Name: cm.Name}}, func(string) *corev1.ConfigMap { return cm }, framework.HashKey, cm.Namespace)
	got := d.Spec.Template.Annotations[stamp.HashAnnotation]
	switch {
	case adopted && n == 0 && got != "":
		return fmt.Sprintf("adopted and never edited, but stamped %s (want no stamp, only the record)", short(got))
	case !(adopted && n == 0) && got == "":
		return fmt.Sprintf("not stamped (%d edits, adopted %v)", n, adopted)
	case got != "" && got != want:
		return fmt.Sprintf("stamp %s, want %s (revision %d)", short(got), short(want), n)
	}
	if rec, ok := stamp.ParseObserved(d.Annotations[stamp.ObservedAnnotation]); !ok || rec.Hash != want {
		return fmt.Sprintf("record %q, want hash %s", d.Annotations[stamp.ObservedAnnotation], short(want))
	}
	return ""
}

// settle waits until every Deployment carries the stamp (or record) of its ConfigMap's
// content (up to ten minutes), then for quiet more, in which a late second nudge would
// still show. Not its generation: where one nudge answered two edits (configstamp
// behind) it stays one short of the edits for good.
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
			if stampProblem(cms[o.configMapKey()], deps[o.key()], o.adopted) != "" {
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

// history is what the API server's audit log shows from configstamp's start.
type history struct {
	edits   map[string][]time.Time // by ConfigMap: the admin's PATCHes that succeeded
	reads   map[string][]time.Time // by ConfigMap: configstamp's GETs of it
	nudges  map[string][]time.Time // by Deployment: configstamp's nudges that succeeded
	records map[string][]time.Time // by Deployment: configstamp's record writes that succeeded
}

// marker is the value of the nudge marker in a PATCH body (ok false: none).
func marker(body json.RawMessage) (value string, ok bool) {
	var p struct {
		Metadata struct{ Annotations map[string]*string }
	}
	if len(body) == 0 || json.Unmarshal(body, &p) != nil {
		return "", false
	}
	v := p.Metadata.Annotations[stamp.NudgeAnnotation]
	if v == nil {
		return "", false
	}
	return *v, true
}

// readHistory reads the audit log after mark (configstamp's start) into h, and
// classifies configstamp's PATCHes of Deployments into v: the test control plane logs
// those at level Request (test/cluster), so the body says which it is: the nudge
// marker "key=<fingerprint>" (a nudge) or "record" (a record write).
func readHistory(auditLog string, mark bench.AuditMark, v *verdict) (history, error) {
	h := history{edits: map[string][]time.Time{}, reads: map[string][]time.Time{}, nudges: map[string][]time.Time{}, records: map[string][]time.Time{}}
	err := bench.ReadAudit(auditLog, mark, func(ev *bench.AuditEvent) {
		if ev.Stage != "ResponseComplete" || ev.ResponseStatus == nil {
			return
		}
		key := ev.ObjectRef.Namespace + "/" + ev.ObjectRef.Name
		ok := ev.ResponseStatus.Code/100 == 2
		user, res := ev.User.Username, ev.ObjectRef.Resource
		switch {
		case user == cluster.AdminUser && res == "configmaps" && ev.Verb == "patch" && ok:
			h.edits[key] = append(h.edits[key], ev.StageTimestamp)
		case user == cluster.ConfigstampUser && res == "configmaps" && ev.Verb == "get":
			h.reads[key] = append(h.reads[key], ev.StageTimestamp)
		case user == cluster.ConfigstampUser && res == "deployments" && ev.Verb == "patch":
			if failedOpen(ev.Annotations) {
				v.failedOpen++
			}
			m, found := marker(ev.RequestObject)
			nudge := found && stamp.ParseMarker(map[string]string{stamp.NudgeAnnotation: m}).Nudge
			switch {
			case nudge && ok:
				v.nudges++
				h.nudges[key] = append(h.nudges[key], ev.StageTimestamp)
				if !stamped(ev.Annotations) {
					v.unstampedNudges++
				}
			case nudge:
				v.failedNudges++
			case found && m == stamp.NudgeRecord && ok:
				v.records++
				h.records[key] = append(h.records[key], ev.StageTimestamp)
			case found && m == stamp.NudgeRecord:
				v.failedRecords++
			default:
				body := string(ev.RequestObject)
				if len(body) > 200 {
					body = body[:200]
				}
				v.unclassified = append(v.unclassified, fmt.Sprintf("%s %d: %s", key, ev.ResponseStatus.Code, body))
			}
		}
	})
	return h, err
}

// check judges every Deployment against the audit log from mark (configstamp's start)
// and the objects as they are now. editsMark is where the edits began: configstamp's
// record writes after it are counted apart. A Deployment's generation moves with its
// spec and with its metadata annotations (the API server's Deployment strategy:
// annotations are copied to ReplicaSets), so it is 1 + one per nudge (each stamps a new
// template after an edit) + one per record write; with replicas 0 nothing else writes
// it.
func check(ctx context.Context, cs kubernetes.Interface, auditLog string, mark, editsMark bench.AuditMark, objs []object, tally []int) (verdict, error) {
	v := verdict{deployments: len(objs)}
	cms, err := configMaps(ctx, cs, objs)
	if err != nil {
		return v, err
	}
	deps, err := deployments(ctx, cs, objs)
	if err != nil {
		return v, err
	}
	h, err := readHistory(auditLog, mark, &v)
	if err != nil {
		return v, err
	}
	editPhase := map[string]int{} // record writes after the edits began, by Deployment
	err = bench.ReadAudit(auditLog, editsMark, func(ev *bench.AuditEvent) {
		if ev.Stage == "ResponseComplete" && ev.ResponseStatus != nil && ev.ResponseStatus.Code/100 == 2 &&
			ev.User.Username == cluster.ConfigstampUser && ev.ObjectRef.Resource == "deployments" && ev.Verb == "patch" {
			if m, ok := marker(ev.RequestObject); ok && m == stamp.NudgeRecord {
				editPhase[ev.ObjectRef.Namespace+"/"+ev.ObjectRef.Name]++
			}
		}
	})
	if err != nil {
		return v, err
	}
	lags := answerTimes(objs, h)
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
		nudges, records := h.nudges[o.key()], h.records[o.key()]
		wantRecords := 0
		if o.adopted {
			wantRecords = 1
		}
		if len(records) != wantRecords {
			v.unexpectedRecords++
		}
		var wrong []string
		if p := stampProblem(cm, d, o.adopted); p != "" {
			v.wrongHash++
			wrong = append(wrong, p)
		}
		if want := int64(1 + len(nudges) + len(records)); d.Generation != want {
			v.wrongGeneration++
			wrong = append(wrong, fmt.Sprintf("generation %d, want %d (1 + nudges + record writes)", d.Generation, want))
		}
		if n > 0 && editPhase[o.key()] > 0 {
			v.editPhaseRecords++
			wrong = append(wrong, fmt.Sprintf("%d record writes during the edits (configstamp judged its pods to run the edited config without a rollout)", editPhase[o.key()]))
		}
		if w := v.windows(o, n, h, lags); len(w) > 0 {
			v.wrongNudges++
			wrong = append(wrong, w...)
		}
		if len(wrong) > 0 {
			v.problems = append(v.problems, fmt.Sprintf("%s (adopted %v): %s; %d edits, %d nudges, %d record writes", o.key(), o.adopted,
				strings.Join(wrong, "; "), n, len(nudges), len(records)))
		}
	}
	v.latency = measureLatency(objs, h.edits, h.nudges)
	return v, nil
}

// windows checks one Deployment's nudges against its ConfigMap's edits (audit log
// times): no nudge before the first edit; exactly one in each window from an edit to
// the next edit of the ConfigMap, and from the last edit to the check. An empty window
// other than the last is excused only with evidence that configstamp was behind (see
// behind); the last one never (the check comes after every Deployment was current and
// the settle). It counts the windows into v and returns what is wrong.
func (v *verdict) windows(o object, n int, h history, lags []answered) []string {
	e, nudges := h.edits[o.configMapKey()], h.nudges[o.key()]
	if len(e) != n {
		return []string{fmt.Sprintf("the audit log shows %d edits of the ConfigMap, its revision %d: windows not judged", len(e), n)}
	}
	var wrong []string
	in := func(from, to time.Time) int { // nudges in (from, to]; zero to: no end
		c := 0
		for _, t := range nudges {
			if t.After(from) && (to.IsZero() || !t.After(to)) {
				c++
			}
		}
		return c
	}
	if n == 0 {
		if len(nudges) > 0 {
			wrong = append(wrong, fmt.Sprintf("nudged %d times, never edited", len(nudges)))
		}
		return wrong
	}
	if before := len(nudges) - in(e[0], time.Time{}); before > 0 {
		wrong = append(wrong, fmt.Sprintf("nudged %d times before its first edit", before))
	}
	for k := range e {
		var end time.Time
		if k+1 < len(e) {
			end = e[k+1]
		}
		switch c := in(e[k], end); {
		case c == 1:
			v.windowsOne++
		case c > 1:
			v.windowsDouble++
			wrong = append(wrong, fmt.Sprintf("edit %d nudged %d times", k+1, c))
		case end.IsZero():
			v.windowsLost++
			wrong = append(wrong, fmt.Sprintf("edit %d (the last) never nudged", k+1))
		default:
			if why, ok := behind(o, e[k], end, h, lags); ok {
				v.windowsExcused++
				v.excused = append(v.excused, fmt.Sprintf("%s edit %d: %s", o.key(), k+1, why))
			} else {
				v.windowsLost++
				wrong = append(wrong, fmt.Sprintf("edit %d not nudged before edit %d (%s later): %s", k+1, k+2, end.Sub(e[k]).Round(time.Millisecond), why))
			}
		}
	}
	return wrong
}

// behind says whether the audit log shows configstamp behind over the window (from,
// to] of o's ConfigMap, and what it shows either way. The evidence is the edits of
// other ConfigMaps made within lagNeighbourhood of from: configstamp was behind if they
// waited longer for their nudge (median) than the window lasted. Whether configstamp
// read the ConfigMap within the window is said too, but does not excuse on its own: a
// watcher that drops the change unread would pass that as well.
func behind(o object, from, to time.Time, h history, lags []answered) (string, bool) {
	read := "not read by configstamp within the window"
	for _, t := range h.reads[o.configMapKey()] {
		if t.After(from) && !t.After(to) {
			read = fmt.Sprintf("read by configstamp %s after the edit", t.Sub(from).Round(time.Millisecond))
			break
		}
	}
	var around []time.Duration
	for _, a := range lags {
		if a.configMap != o.configMapKey() && a.at.Sub(from).Abs() <= lagNeighbourhood {
			around = append(around, a.wait)
		}
	}
	window := to.Sub(from).Round(time.Millisecond)
	if len(around) == 0 {
		return fmt.Sprintf("%s; no edit of another ConfigMap within %s to show a lag: not shown behind", read, lagNeighbourhood), false
	}
	slices.Sort(around)
	med := around[len(around)/2]
	if med <= to.Sub(from) {
		return fmt.Sprintf("%s; the %d edits of other ConfigMaps within %s waited %s (median) for their nudge, within the %s window: not behind",
			read, len(around), lagNeighbourhood, fmtWait(med), window), false
	}
	return fmt.Sprintf("%s; the %d edits of other ConfigMaps within %s waited %s (median) for their nudge, longer than the %s window",
		read, len(around), lagNeighbourhood, fmtWait(med), window), true
}

// answered is one edit and how long it waited for the first nudge of its Deployment
// after it (noAnswer: none came).
type answered struct {
	configMap string
	at        time.Time
	wait      time.Duration
}

const noAnswer = time.Duration(math.MaxInt64)

func fmtWait(d time.Duration) string {
	if d == noAnswer {
		return "forever (no nudge)"
	}
	return d.Round(time.Millisecond).String()
}

// answerTimes is every edit with its wait for the first nudge after it.
func answerTimes(objs []object, h history) []answered {
	var out []answered
	for _, o := range objs {
		nudges := h.nudges[o.key()]
		for _, e := range h.edits[o.configMapKey()] {
			a := answered{configMap: o.configMapKey(), at: e, wait: noAnswer}
			if k := slices.IndexFunc(nudges, func(t time.Time) bool { return t.After(e) }); k >= 0 {
				a.wait = nudges[k].Sub(e)
			}
			out = append(out, a)
		}
	}
	return out
}

// failedOpen reports an audit event whose request the API server admitted with a
// mutating webhook failed open (configstamp's is the only one in the soak's cluster).
func failedOpen(annotations map[string]string) bool {
	for k := range annotations {
		if strings.HasPrefix(k, "failed-open.mutation.webhook.admission.k8s.io/") {
			return true
		}
	}
	return false
}

// stamped reports whether an audit event shows the webhook computed a stamp and changed
// the request: configstamp's config-hash audit annotation (keyed by whichever webhook
// entry name configstamp registered) and the API server's record of a call of a
// webhook that mutated it (mutation.webhook.admission.k8s.io, "mutated": true).
func stamped(annotations map[string]string) bool {
	hash, mutated := false, false
	for k, v := range annotations {
		if strings.HasSuffix(k, "/"+webhook.AuditHash) {
			hash = true
		}
		if strings.HasPrefix(k, "mutation.webhook.admission.k8s.io/") {
			var call struct{ Mutated bool }
			if json.Unmarshal([]byte(v), &call) == nil && call.Mutated {
				mutated = true
			}
		}
	}
	return hash && mutated
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
