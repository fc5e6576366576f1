package watcher

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/waves"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// countingReader counts the reads made through it (the gate's live reads).
type countingReader struct {
	client.Reader
	reads atomic.Int64
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.reads.Add(1)
	return c.Reader.Get(ctx, key, obj, opts...)
}

func (c *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.reads.Add(1)
	return c.Reader.List(ctx, list, opts...)
}

// testGate is a gate over c (its cache) with live reads counted, for Deployments, scoped
// by the opt-in label.
func testGate(t *testing.T, c client.Client, cluster waves.Settings) (*wavesGate, *countingReader) {
	t.Helper()
	sc, err := scope.New(stamp.InjectLabel, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cluster.Steps) == 0 {
		cluster.Steps, _ = waves.ParseSteps(waves.DefaultSteps)
	}
	live := &countingReader{Reader: c}
	return &wavesGate{cluster: cluster, deadline: 1e12, cache: c, live: live, key: testKey, scope: sc,
		kinds: func() []*workload.Kind { return []*workload.Kind{workload.Deployment} }, recorder: events.NewFakeRecorder(100)}, live
}

func wavesClient(objs ...client.Object) client.Client {
	return fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(objs...).
		WithIndex(workload.Deployment.New(), SourceIndex, indexSources(workload.Deployment, stamp.Options{})).Build()
}

// With waves off (the default), a roll asks the gate and the gate reads only the caches
// (the source's metadata and its namespace's labels): no live read. Turned on by the
// namespace's label, it reads the source live, unless the caches hold fewer consumers
// than the threshold.
func TestWavesGateOffMakesNoLiveRead(t *testing.T) {
	src := stamp.Source{Kind: stamp.KindConfigMap, Name: "cfg", AllKeys: true}
	for _, tc := range []struct {
		name         string
		cluster      bool
		nsLabel, ann string
		threshold    int
		live         bool
	}{
		{name: "off everywhere"},
		{name: "off on the source, on in the namespace", nsLabel: "on", ann: "off"},
		{name: "off in the namespace, on in the cluster", cluster: true, nsLabel: "off"},
		{name: "on in the namespace", nsLabel: "on", threshold: 1, live: true},
		{name: "on on the source", ann: "1,50%", threshold: 1, live: true},
		{name: "on, fewer consumers in the caches than the threshold", ann: "on", threshold: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := optedInNamespace()
			if tc.nsLabel != "" {
				ns.Labels[waves.Annotation] = tc.nsLabel
			}
			cm := cfgMap("new")
			if tc.ann != "" {
				cm.Annotations = map[string]string{waves.Annotation: tc.ann}
			}
			dep := cfgDeployment()
			c := wavesClient(ns, cm, dep)
			g, live := testGate(t, c, waves.Settings{On: tc.cluster, Threshold: tc.threshold})
			r := &workloadReconciler{kind: workload.Deployment, waves: g}
			want := stamp.Stamp{Sources: []stamp.Digest{stamp.SourceDigest(src, cm, stamp.NamespaceKey(testKey(), "ns"))}}
			j := judged{obj: dep, key: appKey, refs: []stamp.Source{src}, storedSources: "configmap/cfg=111111111111", want: want}
			for range 3 { // the fan-out of one change: one roll per consumer
				if _, held, _ := r.waveHold(context.Background(), j); held != "" {
					t.Fatalf("held: %s", held)
				}
			}
			if got := live.reads.Load(); (got > 0) != tc.live {
				t.Errorf("%d live reads, want any: %v", got, tc.live)
			}
		})
	}
}

// A change's members are the consumers the watcher rolls: not those out of its scope, nor
// paused ones (it never rolls them: a wave waiting for them would wait for ever).
func TestWavesMembersAreWhatTheWatcherRolls(t *testing.T) {
	ns := optedInNamespace()
	delete(ns.Labels, stamp.InjectLabel)
	ns.Labels = map[string]string{waves.Annotation: "on"}
	dep := func(name string, optIn, paused bool) *appsv1.Deployment {
		d := cfgDeployment()
		d.Name = name
		if optIn {
			d.Labels = map[string]string{stamp.InjectLabel: stamp.InjectValue}
		}
		d.Spec.Paused = paused
		return d
	}
	c := wavesClient(ns, cfgMap("new"), dep("a", true, false), dep("b", false, false), dep("c", true, true), dep("d", true, false))
	g, _ := testGate(t, c, waves.Settings{Threshold: 1})
	p, err := g.evaluate(context.Background(), "ns", stamp.Source{Kind: stamp.KindConfigMap, Name: "cfg", AllKeys: true}, planFresh)
	if err != nil || p == nil {
		t.Fatalf("plan %v, error %v", p, err)
	}
	var ids []string
	for _, m := range p.members {
		ids = append(ids, m.ID)
	}
	if want := []string{"deployment/a", "deployment/d"}; !slices.Equal(ids, want) {
		t.Errorf("members %v, want %v", ids, want)
	}
}

// Health is read from the cache where the cached object carries the member's record of
// the nudge for the change (it has seen the write that rolled it), and canaries from the
// cached labels: an evaluation of a wave of rolled members, not yet available or
// available, reads the source live and nothing else, however many evaluations. A member
// whose cached object carries no record, or none at all, is read live; so is a failure
// the cache shows, before it is recorded (it halts the change).
func TestWavesHealthFromTheCache(t *testing.T) {
	ns := optedInNamespace()
	ns.Labels[waves.Annotation] = "on"
	cm := cfgMap("new")
	cm.Annotations = map[string]string{waves.Annotation: "100%"} // the canary, then the rest
	canary := judgedDeployment("z", cm, true, 1, 2, time.Now())
	canary.Labels = map[string]string{waves.CanaryLabel: "true"}
	objs := []client.Object{ns, cm, canary}
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		objs = append(objs, judgedDeployment(name, cm, false, 2, 2, time.Now()))
	}
	c := wavesClient(objs...)
	g, live := testGate(t, c, waves.Settings{Threshold: 1})
	ctx := context.Background()
	nsMeta, err := g.namespace(ctx, "ns")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		p, err := g.read(ctx, nsMeta, stamp.SourceKindNamed(stamp.KindConfigMap), "cfg")
		if err != nil || p == nil {
			t.Fatalf("plan %v, error %v", p, err)
		}
		if p.members[0].ID != "deployment/z" || !p.members[0].Canary || p.verdict.Current != 2 || len(p.verdict.Waiting) != 5 || !p.pending {
			t.Fatalf("evaluation %d: %+v, members %+v: want the canary z done, 5 rolled members of wave 2 not yet available", i, p.verdict, p.members)
		}
	}
	if got := live.reads.Load(); got != 3 {
		t.Errorf("three evaluations of 6 rolled members made %d live reads, want 3 (the source's)", got)
	}

	// Without the record of the nudge (or not cached): read live.
	change := changeOf(cm)
	for name, cached := range map[string]client.Object{"no record": rolledDeployment("a", cm, false), "not cached": nil} {
		before := live.reads.Load()
		m := &waves.Member{ID: "deployment/a", Rolled: true, Judged: true}
		g.health(ctx, m, memberObj{kind: workload.Deployment, key: types.NamespacedName{Namespace: "ns", Name: "a"}, cached: cached}, change, g.deadline)
		if got := live.reads.Load() - before; got != 1 {
			t.Errorf("%s: %d live reads, want 1", name, got)
		}
	}

	// A failure in the cache is read again live: available there, not failed.
	failed := deadlineExceeded(judgedDeployment("a", cm, false, 2, 2, time.Now()))
	before := live.reads.Load()
	m := &waves.Member{ID: "deployment/a", Rolled: true, Judged: true}
	if g.health(ctx, m, memberObj{kind: workload.Deployment, key: types.NamespacedName{Namespace: "ns", Name: "a"}, cached: failed}, change, g.deadline) || m.Failed != "" {
		t.Errorf("failed in the cache, rolling live: recorded failed (%q)", m.Failed)
	}
	if got := live.reads.Load() - before; got != 1 {
		t.Errorf("a failure in the cache: %d live reads, want 1", got)
	}

	// The nudge's write in the cache (it bumped the generation), its controller's status
	// still of the generation before, all available: not ready (nor read live).
	stale := judgedDeployment("a", cm, true, 2, 2, time.Now())
	stale.Generation, stale.Status.ObservedGeneration = 3, 2
	before = live.reads.Load()
	m = &waves.Member{ID: "deployment/a", Rolled: true, Judged: true}
	g.health(ctx, m, memberObj{kind: workload.Deployment, key: types.NamespacedName{Namespace: "ns", Name: "a"}, cached: stale}, change, g.deadline)
	if m.Ready || m.Failed != "" || live.reads.Load() != before {
		t.Errorf("cached status of the generation before the nudge: ready %v, failed %q, %d live reads; want not ready, none",
			m.Ready, m.Failed, live.reads.Load()-before)
	}
}

// rolledDeployment is cfgDeployment named name, stamped with cm's digest and available
// (ready) or not.
func rolledDeployment(name string, cm *corev1.ConfigMap, ready bool) *appsv1.Deployment {
	d := cfgDeployment()
	d.Name = name
	d.Spec.Replicas = ptr.To[int32](1)
	src := stamp.Consumed(nil, &d.Spec.Template.Spec, stamp.Options{})[0]
	d.Spec.Template.Annotations = map[string]string{stamp.SourcesAnnotation: stamp.Stamp{Sources: []stamp.Digest{
		stamp.SourceDigest(src, cm, stamp.NamespaceKey(testKey(), "ns"))}}.SourcesAnnotation()}
	if ready {
		d.Status = appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1, Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"}}}
	}
	return d
}

// Held workloads are not all checked every few seconds while a change rolls (each check
// reads config live): the first held one is, the others every minute, and all are woken
// once a wave is done.
func TestWavesHeldWaitToBeWoken(t *testing.T) {
	ns := optedInNamespace()
	ns.Labels[waves.Annotation] = "1"
	cm := cfgMap("new")
	var objs []client.Object
	for _, name := range []string{"a", "b", "c", "d"} {
		d := cfgDeployment()
		d.Name = name
		objs = append(objs, d)
	}
	c := wavesClient(append(objs, ns, cm)...)
	g, _ := testGate(t, c, waves.Settings{Threshold: 1})
	var woken []string
	g.wake = func(_ context.Context, kind string, key types.NamespacedName) {
		woken = append(woken, kind+" "+key.String())
	}
	src := stamp.Source{Kind: stamp.KindConfigMap, Name: "cfg", AllKeys: true}
	want := stamp.Stamp{Sources: []stamp.Digest{stamp.SourceDigest(src, cm, stamp.NamespaceKey(testKey(), "ns"))}}
	hold := func(name string) time.Duration {
		t.Helper()
		r := &workloadReconciler{kind: workload.Deployment, waves: g}
		j := judged{obj: objs[0], key: types.NamespacedName{Namespace: "ns", Name: name}, refs: []stamp.Source{src},
			storedSources: "configmap/cfg=111111111111", want: want}
		_, held, retry := r.waveHold(context.Background(), j)
		if held == "" {
			t.Fatalf("%s not held", name)
		}
		return retry
	}
	// Waves a | b | c, d: the canary rolls; b is the first held.
	if got := hold("b"); got != wavesWaitRetry {
		t.Errorf("first held: checked again in %s, want %s", got, wavesWaitRetry)
	}
	if got := hold("c"); got != wavesIdleRetry {
		t.Errorf("held after the first: checked again in %s, want %s", got, wavesIdleRetry)
	}
	if len(woken) > 0 {
		t.Fatalf("woken before a wave was done: %v", woken)
	}
	// The canary rolled and is available: the next evaluation wakes every consumer.
	if err := c.Delete(context.Background(), objs[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(context.Background(), rolledDeployment("a", cm, true)); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	for _, p := range g.plans {
		p.at = time.Time{}
	}
	g.mu.Unlock()
	if got := hold("c"); got != wavesWaitRetry {
		t.Errorf("first held of wave 3: checked again in %s, want %s", got, wavesWaitRetry)
	}
	if want := []string{"configmap ns/cfg"}; !slices.Equal(woken, want) {
		t.Errorf("woken %v, want %v", woken, want)
	}
}

// A canary deleted while its wave rolls: the next member is the canary and rolls, and
// the member first held after it is woken (checked again soon), not left to the
// minute's retry of held members.
func TestWavesWokenWhenCanaryDeleted(t *testing.T) {
	ns := optedInNamespace()
	ns.Labels[waves.Annotation] = "1"
	cm := cfgMap("new")
	canary := judgedDeployment("a", cm, false, 1, 3, time.Now())
	canary.Labels = map[string]string{waves.CanaryLabel: "true"}
	objs := []client.Object{canary}
	for _, name := range []string{"b", "c", "d"} {
		d := cfgDeployment()
		d.Name = name
		objs = append(objs, d)
	}
	c := wavesClient(append(objs, ns, cm)...)
	g, _ := testGate(t, c, waves.Settings{Threshold: 1})
	var woken []string
	g.wake = func(_ context.Context, kind string, key types.NamespacedName) {
		woken = append(woken, kind+" "+key.String())
	}
	src := stamp.Source{Kind: stamp.KindConfigMap, Name: "cfg", AllKeys: true}
	want := stamp.Stamp{Sources: []stamp.Digest{stamp.SourceDigest(src, cm, stamp.NamespaceKey(testKey(), "ns"))}}
	hold := func(name string) string {
		t.Helper()
		r := &workloadReconciler{kind: workload.Deployment, waves: g}
		j := judged{obj: objs[1], key: types.NamespacedName{Namespace: "ns", Name: name}, refs: []stamp.Source{src},
			storedSources: "configmap/cfg=111111111111", want: want}
		_, held, _ := r.waveHold(context.Background(), j)
		return held
	}
	// Waves a | b | c, d: the canary a rolled and is not available; b is held.
	if hold("b") == "" {
		t.Fatal("b not held behind the canary")
	}
	if err := c.Delete(context.Background(), canary); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	for _, p := range g.plans {
		p.at = time.Time{}
	}
	g.mu.Unlock()
	// Waves b | c | d: b rolls; c, first held now, is woken.
	if held := hold("b"); held != "" {
		t.Fatalf("b held with the canary gone: %s", held)
	}
	if want := []string{"configmap ns/cfg"}; !slices.Equal(woken, want) {
		t.Errorf("woken %v, want %v", woken, want)
	}
}

// A resume command lifts a user's halt, and passes only the failures `configstamp
// resume` marked resumed: a failure recorded after it (a later wave's) halts the change
// again, however long the command stays on the source.
func TestWavesResumeCommandPassesNoLaterFailure(t *testing.T) {
	ns := optedInNamespace()
	ns.Labels[waves.Annotation] = "1"
	cm := cfgMap("bad")
	change := "configmap/cfg=" + stamp.SourceDigest(stamp.Source{Kind: stamp.KindConfigMap, Name: "cfg", AllKeys: true, Binary: true},
		cm, stamp.NamespaceKey(testKey(), "ns")).Hex()[:12]
	cm.Annotations = map[string]string{waves.CommandAnnotation: "resume " + change}
	a := rolledDeployment("a", cm, false)
	a.Annotations = map[string]string{waves.FailedAnnotation: waves.FailedRecord("deployment/a", change, "")} // resumed
	b := rolledDeployment("b", cm, false)
	b.Annotations = map[string]string{waves.FailedAnnotation: waves.FailedRecord("deployment/b", change, "did not become available: x")}
	c := cfgDeployment()
	c.Name = "c"
	cl := wavesClient(ns, cm, a, b, c)
	g, _ := testGate(t, cl, waves.Settings{Threshold: 1})
	p, err := g.evaluate(context.Background(), "ns", stamp.Source{Kind: stamp.KindConfigMap, Name: "cfg", AllKeys: true}, planFresh)
	if err != nil || p == nil {
		t.Fatalf("plan %v, error %v", p, err)
	}
	if p.verdict.Halted == "" || p.verdict.May(3) {
		t.Errorf("%+v: the failure of wave 2 after the resume did not halt the change", p.verdict)
	}
	var got appsv1.Deployment
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "b"}, &got); err != nil {
		t.Fatal(err)
	}
	if v := got.Annotations[waves.FailedAnnotation]; v != b.Annotations[waves.FailedAnnotation] {
		t.Errorf("the failure record rewritten: %q", v)
	}
}

// A member seen available is remembered for the workload it was, not its name: one
// deleted and created again under its name, rolled on the change and not yet available,
// holds the wave until it is.
func TestWavesReadyMemoIsOfTheWorkloadNotTheName(t *testing.T) {
	ns := optedInNamespace()
	ns.Labels[waves.Annotation] = "on"
	cm := cfgMap("new")
	a := judgedDeployment("a", cm, true, 1, 1, time.Now())
	a.UID = "first"
	c := wavesClient(ns, cm, a)
	g, _ := testGate(t, c, waves.Settings{Threshold: 1})
	ctx := context.Background()
	nsMeta, err := g.namespace(ctx, "ns")
	if err != nil {
		t.Fatal(err)
	}
	read := func() waves.Verdict {
		t.Helper()
		p, err := g.read(ctx, nsMeta, stamp.SourceKindNamed(stamp.KindConfigMap), "cfg")
		if err != nil || p == nil {
			t.Fatalf("plan %v, error %v", p, err)
		}
		return p.verdict
	}
	if v := read(); v.Current != v.Waves+1 {
		t.Fatalf("a available: %+v, want every wave done", v)
	}
	if err := c.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	again := judgedDeployment("a", cm, false, 1, 1, time.Now())
	again.UID = "second"
	if err := c.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	if v := read(); v.Current > v.Waves {
		t.Errorf("a created again, not available: %+v, want its wave not done", v)
	}
}

// lists counts the Lists made through a client.
type lists struct {
	client.Client
	n atomic.Int64
}

func (c *lists) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.n.Add(1)
	return c.Client.List(ctx, list, opts...)
}

// An evaluation the memo answers walks no consumers: every check of a wave's fan-out
// asks the gate, and counting a source's consumers at each would cost consumers squared.
func TestWavesMemoCountsNoConsumers(t *testing.T) {
	ns := optedInNamespace()
	ns.Labels[waves.Annotation] = "on"
	cm := cfgMap("new")
	c := &lists{Client: wavesClient(ns, cm, rolledDeployment("a", cm, false), rolledDeployment("b", cm, false))}
	g, _ := testGate(t, c, waves.Settings{Threshold: 1})
	g.live = wavesClient(ns, cm, rolledDeployment("a", cm, false), rolledDeployment("b", cm, false))
	if p, err := g.evaluate(context.Background(), "ns", cfgSource, planFresh); err != nil || p == nil {
		t.Fatalf("plan %v, error %v", p, err)
	}
	before := c.n.Load()
	if p, err := g.evaluate(context.Background(), "ns", cfgSource, planFresh); err != nil || p == nil {
		t.Fatalf("plan %v, error %v", p, err)
	}
	if got := c.n.Load() - before; got != 0 {
		t.Errorf("an evaluation the memo answers made %d lists of the caches, want 0", got)
	}
}

// gathering holds each Get of a ConfigMap until n are made or a while has passed, and
// counts them.
type gathering struct {
	client.Reader
	n    int64
	gets atomic.Int64
	all  chan struct{}
}

func (c *gathering) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.ConfigMap); ok {
		if c.gets.Add(1) == c.n {
			close(c.all)
		}
		select {
		case <-c.all:
		case <-time.After(500 * time.Millisecond):
		}
	}
	return c.Reader.Get(ctx, key, obj, opts...)
}

// Workers that find the memo of a source's change too old at once share one read of it
// (each read costs the source, canaries and the health of every member not yet
// available): the bound of planFreshToRoll holds whatever the concurrency.
func TestWavesConcurrentEvaluationsShareARead(t *testing.T) {
	ns := optedInNamespace()
	ns.Labels[waves.Annotation] = "on"
	cm := cfgMap("new")
	c := wavesClient(ns, cm, rolledDeployment("a", cm, false), rolledDeployment("b", cm, false))
	g, _ := testGate(t, c, waves.Settings{Threshold: 1})
	const workers = 8
	live := &gathering{Reader: c, n: workers, all: make(chan struct{})}
	g.live = live
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			if p, err := g.evaluate(context.Background(), "ns", cfgSource, planFreshToRoll); err != nil || p == nil {
				t.Errorf("plan %v, error %v", p, err)
			}
		})
	}
	wg.Wait()
	if got := live.gets.Load(); got != 1 {
		t.Errorf("%d workers evaluating at once read the source %d times, want once", workers, got)
	}
}

// A namespace's waves annotations (steps, threshold) are the gate's for its sources,
// over its label (off here) and under the source's annotations: read from the cache's
// metadata of the namespace.
func TestWavesNamespaceAnnotations(t *testing.T) {
	for _, tc := range []struct {
		name, threshold, src string
		waves, waveOfC       int
	}{
		{name: "namespace steps 2", threshold: "4", waves: 3, waveOfC: 2},
		{name: "namespace threshold over the consumers", threshold: "5"},
		{name: "source steps over the namespace's", threshold: "4", src: "1", waves: 3, waveOfC: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := optedInNamespace()
			ns.Labels[waves.Annotation] = "off"
			ns.Annotations = map[string]string{waves.Annotation: "2", waves.ThresholdAnnotation: tc.threshold}
			cm := cfgMap("new")
			if tc.src != "" {
				cm.Annotations = map[string]string{waves.Annotation: tc.src}
			}
			c := wavesClient(ns, cm, cfgDeploymentNamed("a"), cfgDeploymentNamed("b"), cfgDeploymentNamed("c"), cfgDeploymentNamed("d"))
			g, _ := testGate(t, c, waves.Settings{})
			p, err := g.evaluate(context.Background(), "ns", cfgSource, planFresh)
			if err != nil || p == nil && tc.waves > 0 {
				t.Fatalf("plan %v, error %v", p, err)
			}
			if p == nil { // fewer consumers in the cache than the threshold: no waves
				return
			}
			if p.verdict.Waves != tc.waves {
				t.Errorf("%d waves (%+v), want %d", p.verdict.Waves, p.settings, tc.waves)
			}
			if tc.waves > 0 {
				if got := waves.WaveOf(p.settings, p.members, "deployment/c"); got != tc.waveOfC {
					t.Errorf("deployment/c in wave %d, want %d", got, tc.waveOfC)
				}
			}
		})
	}
}
