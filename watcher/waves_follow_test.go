package watcher

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/internal/notify"
	"github.com/configstamp/configstamp/internal/waves"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

var cfgSource = stamp.Source{Kind: stamp.KindConfigMap, Name: "cfg", AllKeys: true}

// changeOf is the change of cm as the gate names it.
func changeOf(cm *corev1.ConfigMap) string {
	return waves.ChangeOf(stamp.KindConfigMap, "cfg", cm, stamp.NamespaceKey(testKey(), "ns"))
}

// judgedDeployment is rolledDeployment rolled by the watcher's nudge in wave of waves
// for cm's change at at (its RolledAnnotation): its health counts.
func judgedDeployment(name string, cm *corev1.ConfigMap, ready bool, wave, of int, at time.Time) *appsv1.Deployment {
	d := rolledDeployment(name, cm, ready)
	d.Annotations = map[string]string{waves.RolledAnnotation: waves.RolledEntry{Change: changeOf(cm), Wave: wave, Waves: of, At: at}.String()}
	return d
}

// deadlineExceeded makes d's controller give up on its rollout.
func deadlineExceeded(d *appsv1.Deployment) *appsv1.Deployment {
	d.Status = appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 1, AvailableReplicas: 1, Conditions: []appsv1.DeploymentCondition{
		{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}}}
	return d
}

func annotationOf(t *testing.T, c client.Client, name, key string) string {
	t.Helper()
	var d appsv1.Deployment
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: name}, &d); err != nil {
		t.Fatal(err)
	}
	return d.Annotations[key]
}

// A failure in the last wave holds nothing, so no held workload's check reads its
// health: the source is followed while its change rolls, and the failure is recorded,
// reported (RolloutHalted, the halt metric) and the following stops.
func TestWavesLastWaveFailureReported(t *testing.T) {
	ns := optedInNamespace()
	ns.Labels[waves.Annotation] = "on"
	cm := cfgMap("new")
	now := time.Now()
	a := judgedDeployment("a", cm, true, 1, 2, now)
	b := judgedDeployment("b", cm, false, 2, 2, now)
	c := wavesClient(ns, cm, a, b)
	g, _ := testGate(t, c, waves.Settings{Threshold: 1, Steps: []waves.Step{{N: 1}}})
	src := &sourceReconciler{kind: stamp.KindConfigMap, debounce: newDebouncer[types.NamespacedName](time.Second, time.Minute), follow: g.follow}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "cfg"}}

	// b (wave 2 of 2) rolled and is not available yet: followed soon.
	res, err := src.Reconcile(context.Background(), req)
	if err != nil || res.RequeueAfter != wavesWaitRetry {
		t.Fatalf("last wave rolling: requeued after %s (%v), want %s", res.RequeueAfter, err, wavesWaitRetry)
	}
	// Its controller gives up: the next follow records it and halts the change.
	if err := c.Status().Update(context.Background(), deadlineExceeded(b)); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	for _, p := range g.plans {
		p.at = time.Time{}
	}
	g.mu.Unlock()
	halts := counterValue(wavesHalts)
	res, err = src.Reconcile(context.Background(), req)
	if err != nil || res.RequeueAfter != 0 {
		t.Fatalf("halted: requeued after %s (%v), want none", res.RequeueAfter, err)
	}
	if got := annotationOf(t, c, "b", waves.FailedAnnotation); !strings.Contains(got, "ProgressDeadlineExceeded") {
		t.Errorf("failure record on b: %q", got)
	}
	if got := counterValue(wavesHalts) - halts; got != 1 {
		t.Errorf("halts counted: %v, want 1", got)
	}
	rec := g.recorder.(*events.FakeRecorder)
	found := false
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, ReasonRolloutHalted) && strings.Contains(e, "deployment/b") {
			found = true
		}
	}
	if !found {
		t.Error("no RolloutHalted Event naming deployment/b")
	}
}

// Only members the watcher rolled on this change are judged by their health: one that
// carries the change without having rolled on it (it reads only keys the change did not
// touch), broken for its own reasons before, does not halt the change.
func TestWavesUnrelatedFailureHaltsNothing(t *testing.T) {
	ns := optedInNamespace()
	ns.Labels[waves.Annotation] = "on"
	cm := cfgMap("new")
	broken := deadlineExceeded(rolledDeployment("a", cm, false)) // no record of rolling on this change
	c := wavesClient(ns, cm, broken, cfgDeploymentNamed("b"))
	g, _ := testGate(t, c, waves.Settings{Threshold: 1, Steps: []waves.Step{{N: 1}}})
	p, err := g.evaluate(context.Background(), "ns", cfgSource, planFresh)
	if err != nil || p == nil {
		t.Fatalf("plan %v, error %v", p, err)
	}
	if p.verdict.Halted != "" || p.verdict.Current != 2 {
		t.Errorf("%+v: a member broken before the change halted it", p.verdict)
	}
	if got := annotationOf(t, c, "a", waves.FailedAnnotation); got != "" {
		t.Errorf("failure recorded on a: %q", got)
	}
}

func cfgDeploymentNamed(name string) *appsv1.Deployment {
	d := cfgDeployment()
	d.Name = name
	return d
}

// The deadline of kinds without their own is counted from the rollout the member's
// RolledAnnotation dates, not from when this process first saw it: a restart, or other
// tenants' changes, do not start it again.
func TestWavesDeadlineFromTheRecord(t *testing.T) {
	ns := optedInNamespace()
	ns.Labels[waves.Annotation] = "on"
	cm := cfgMap("new")
	a := judgedDeployment("a", cm, false, 1, 2, time.Now().Add(-time.Hour))
	a.Spec.ProgressDeadlineSeconds = ptr.To[int32](math.MaxInt32) // no deadline of its own
	c := wavesClient(ns, cm, a, cfgDeploymentNamed("b"))
	g, _ := testGate(t, c, waves.Settings{Threshold: 1, Steps: []waves.Step{{N: 1}}})
	g.deadline = 10 * time.Minute
	p, err := g.evaluate(context.Background(), "ns", cfgSource, planFresh)
	if err != nil || p == nil {
		t.Fatalf("plan %v, error %v", p, err)
	}
	if p.verdict.Halted == "" || !strings.Contains(p.verdict.Halted, "waves deadline") {
		t.Errorf("%+v: rolled an hour ago, not available, deadline 10m: not failed at the first read", p.verdict)
	}
}

// A source's waves-deadline annotation is the deadline of its members of kinds without
// their own, over the flag's (g.deadline): rolled an hour ago and not available, a
// member failed under 30m, not under 2h; a bad value keeps the flag's.
func TestWavesDeadlineOfTheSource(t *testing.T) {
	for _, tc := range []struct {
		annotation, flag string
		halted           bool
	}{{"30m", "10h", true}, {"2h", "10m", false}, {"soon", "10m", true}, {"soon", "10h", false}} {
		ns := optedInNamespace()
		ns.Labels[waves.Annotation] = "on"
		cm := cfgMap("new")
		cm.Annotations = map[string]string{waves.DeadlineAnnotation: tc.annotation}
		a := judgedDeployment("a", cm, false, 1, 2, time.Now().Add(-time.Hour))
		a.Spec.ProgressDeadlineSeconds = ptr.To[int32](math.MaxInt32) // no deadline of its own
		c := wavesClient(ns, cm, a, cfgDeploymentNamed("b"))
		g, _ := testGate(t, c, waves.Settings{Threshold: 1, Steps: []waves.Step{{N: 1}}})
		g.deadline, _ = time.ParseDuration(tc.flag)
		p, err := g.evaluate(context.Background(), "ns", cfgSource, planFresh)
		if err != nil || p == nil {
			t.Fatalf("%s: plan %v, error %v", tc.annotation, p, err)
		}
		if got := strings.Contains(p.verdict.Halted, "waves deadline"); got != tc.halted {
			t.Errorf("annotation %s, flag %s: halted %q, want halted %v", tc.annotation, tc.flag, p.verdict.Halted, tc.halted)
		}
	}
}

// A halt is notified once, naming the workload that failed and the change: evaluated
// again (its failure now read from its record), it is not notified again.
func TestWavesHaltNotifiedOnce(t *testing.T) {
	ns := optedInNamespace()
	ns.Labels[waves.Annotation] = "on"
	cm := cfgMap("new")
	a := deadlineExceeded(judgedDeployment("a", cm, false, 1, 2, time.Now()))
	c := wavesClient(ns, cm, a, cfgDeploymentNamed("b"))
	g, _ := testGate(t, c, waves.Settings{Threshold: 1, Steps: []waves.Step{{N: 1}}})
	var sent []notify.Event
	g.notify = func(ev notify.Event) { sent = append(sent, ev) }
	for range 2 {
		p, err := g.evaluate(context.Background(), "ns", cfgSource, 0)
		if err != nil || p == nil || p.verdict.Halted == "" {
			t.Fatalf("plan %+v, error %v: want halted", p, err)
		}
	}
	if len(sent) != 1 {
		t.Fatalf("%d notifications, want 1: %+v", len(sent), sent)
	}
	ev := sent[0]
	if ev.Kind != notify.Halted || ev.Namespace != "ns" || ev.Workload != "Deployment/a" || ev.Change != changeOf(cm) ||
		!slices.Equal(ev.Sources, []string{"configmap/cfg"}) || !strings.HasPrefix(ev.Reason, "failed wave 1 of 2: did not become available") || !strings.HasSuffix(ev.Reason, "ProgressDeadlineExceeded") {
		t.Errorf("notification %+v", ev)
	}
}

// The memo of an evaluation holds workloads, but lets one roll only while younger than
// planFreshToRoll when a member rolled before it may have failed since: a wave's
// failure stops the rest of that wave.
func TestWavesMemoLetsNoneRollPastAFailure(t *testing.T) {
	ns := optedInNamespace()
	ns.Labels[waves.Annotation] = "on"
	cm := cfgMap("new")
	now := time.Now()
	// Waves a | b, c | d.
	a := judgedDeployment("a", cm, true, 1, 3, now)
	b := judgedDeployment("b", cm, false, 2, 3, now)
	c := wavesClient(ns, cm, a, b, cfgDeploymentNamed("c"), cfgDeploymentNamed("d"))
	g, _ := testGate(t, c, waves.Settings{Threshold: 1, Steps: []waves.Step{{N: 2}}})
	r := &workloadReconciler{kind: workload.Deployment, waves: g}
	want := stamp.Stamp{Sources: []stamp.Digest{stamp.SourceDigest(cfgSource, cm, stamp.NamespaceKey(testKey(), "ns"))}}
	j := judged{obj: cfgDeploymentNamed("c"), key: types.NamespacedName{Namespace: "ns", Name: "c"}, refs: []stamp.Source{cfgSource},
		storedSources: "configmap/cfg=111111111111", want: want}
	if _, held, _ := r.waveHold(context.Background(), j); held != "" {
		t.Fatalf("c, in wave 2 rolling, held: %s", held)
	}
	// b fails within the memo's life (planFresh), later than planFreshToRoll: c must
	// not roll.
	if err := c.Status().Update(context.Background(), deadlineExceeded(b)); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	for _, p := range g.plans {
		p.at = time.Now().Add(-planFreshToRoll)
	}
	g.mu.Unlock()
	if _, held, _ := r.waveHold(context.Background(), j); !strings.HasPrefix(held, "halted") {
		t.Errorf("c after b failed: held %q, want halted", held)
	}
}

// An adopted workload (no stamp of the source) whose check finds nothing it reads
// changed is recorded current for the change, and then counts as rolled: it does not
// stall its wave, and is not held by that source's waves for another source's change.
func TestWavesAdoptedCurrentCounts(t *testing.T) {
	ns := optedInNamespace()
	ns.Labels[waves.Annotation] = "on"
	cm := cfgMap("new")
	// Waves a | b | c: a and c adopted (unstamped), b stamped with the old content.
	a, c := cfgDeploymentNamed("a"), cfgDeploymentNamed("c")
	cl := wavesClient(ns, cm, a, rolledDeployment("b", cfgMap("old"), true), c)
	g, _ := testGate(t, cl, waves.Settings{Threshold: 1, Steps: []waves.Step{{N: 1}}})
	p, err := g.evaluate(context.Background(), "ns", cfgSource, 0)
	if err != nil || p == nil || p.verdict.Current != 1 {
		t.Fatalf("before: plan %+v, error %v", p, err)
	}
	r := &workloadReconciler{kind: workload.Deployment, waves: g}
	want := stamp.Stamp{Sources: []stamp.Digest{stamp.SourceDigest(cfgSource, cm, stamp.NamespaceKey(testKey(), "ns"))}}
	of := func(d *appsv1.Deployment) judged {
		return judged{obj: d, key: client.ObjectKeyFromObject(d), refs: []stamp.Source{cfgSource}, want: want}
	}
	r.markCurrent(context.Background(), of(a))
	r.markCurrent(context.Background(), of(c))
	if got := annotationOf(t, cl, "a", waves.RolledAnnotation); got != changeOf(cm)+": current" {
		t.Fatalf("record on a: %q", got)
	}
	p, err = g.evaluate(context.Background(), "ns", cfgSource, 0)
	if err != nil || p == nil || p.verdict.Current != 2 {
		t.Fatalf("after: plan %+v, error %v (want wave 2 rolling: the adopted canary counts)", p, err)
	}
	// Another source's change rolls c: this source's waves (wave 2 rolling) do not hold it.
	c = &appsv1.Deployment{}
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "c"}, c); err != nil {
		t.Fatal(err)
	}
	if _, held, _ := r.waveHold(context.Background(), of(c)); held != "" {
		t.Errorf("held: %s", held)
	}
}

// After a restart every source of the start-up list is queued to be followed, but only
// one whose change rolled in waves lately is evaluated (each evaluation reads the
// source, its canaries and the health of the members it rolled): a change done long
// ago reads nothing.
func TestWavesFollowAfterRestartOnlyRecent(t *testing.T) {
	ns := optedInNamespace()
	ns.Labels[waves.Annotation] = "on"
	cm := cfgMap("new")
	for _, tc := range []struct {
		name     string
		at       time.Time
		deadline string // the source's DeadlineAnnotation
		follow   bool
	}{
		{name: "rolled two days ago", at: time.Now().Add(-48 * time.Hour)},
		{name: "rolled a minute ago", at: time.Now().Add(-time.Minute), follow: true},
		{name: "rolled three hours ago, the source's deadline 4h", at: time.Now().Add(-3 * time.Hour), deadline: "4h", follow: true},
		{name: "rolled three hours ago, the source's deadline 2h", at: time.Now().Add(-3 * time.Hour), deadline: "2h"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := cm.DeepCopy()
			if tc.deadline != "" {
				cm.Annotations = map[string]string{waves.DeadlineAnnotation: tc.deadline}
			}
			c := wavesClient(ns, cm, judgedDeployment("a", cm, true, 1, 2, tc.at), judgedDeployment("b", cm, false, 2, 2, tc.at))
			g, live := testGate(t, c, waves.Settings{Threshold: 1, Steps: []waves.Step{{N: 1}}})
			src := &sourceReconciler{kind: stamp.KindConfigMap, debounce: newDebouncer[types.NamespacedName](time.Second, time.Minute), follow: g.follow}
			key := types.NamespacedName{Namespace: "ns", Name: "cfg"}
			src.restarted.Store(key, true)
			res, err := src.Reconcile(context.Background(), reconcile.Request{NamespacedName: key})
			if err != nil {
				t.Fatal(err)
			}
			if followed := res.RequeueAfter != 0; followed != tc.follow {
				t.Errorf("requeued after %s, want followed %v", res.RequeueAfter, tc.follow)
			}
			if read := live.reads.Load() > 0; read != tc.follow {
				t.Errorf("%d live reads, want some %v", live.reads.Load(), tc.follow)
			}
		})
	}
}

// The record a nudge in waves writes is left out where the workload's annotations could
// not hold it (the API server would refuse the nudge for ever, and the workload would
// never roll).
func TestWavesRolledRecordFits(t *testing.T) {
	entry := waves.RolledEntry{Change: "configmap/cfg=0123456789ab", Wave: 1, Waves: 2, At: time.Now()}
	all := func(string) bool { return true }
	if got := rolledRecord(map[string]string{"a": "b"}, []waves.RolledEntry{entry}, all); got != entry.String() {
		t.Errorf("small annotations: %q, want %q", got, entry.String())
	}
	full := map[string]string{"big": strings.Repeat("x", stamp.AnnotationSizeLimit-len("big")-100)}
	if got := rolledRecord(full, []waves.RolledEntry{entry}, all); got != "" {
		t.Errorf("annotations near the API server's limit: %q, want none", got)
	}
}
