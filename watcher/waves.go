package watcher

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/configstamp/configstamp/internal/notify"
	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/waves"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// Events of changes rolling in waves. ReasonRollingInWaves: a change of a shared source
// rolls in waves (on the source, once per change and leader; it names the change, which
// `configstamp halt|resume` read). ReasonRolloutHalted: it halted (a wave's workload
// failed, or a user halted it); on the source and on each workload it holds.
const (
	ReasonRollingInWaves = "RollingInWaves"
	ReasonRolloutHalted  = "RolloutHalted"
)

// Re-evaluation of a held workload: soon while its change rolls (the wave before it
// becomes available), seldom while the change is halted (a resume or a new change of
// the source is an event of the source that checks every consumer at once).
const (
	// wavesWaitRetry: the first held workload of a change rolling (waves.FirstHeld); the
	// evaluation its check makes wakes every consumer once a wave is done.
	wavesWaitRetry = 5 * time.Second
	// wavesIdleRetry: the other held workloads, a safety net for a wake missed.
	wavesIdleRetry   = time.Minute
	wavesHaltedRetry = time.Minute
	// planFresh is how long one evaluation of a change serves the checks of all its
	// consumers: the reads it makes (the source, canaries, health of the current wave)
	// are made once per source every planFresh, however many consumers it has.
	planFresh = 2 * time.Second
	// planFreshToRoll is how old an evaluation may be to let a workload roll while a
	// workload rolled before it is not yet available (it may fail any moment): a failure
	// lets the rest of its wave roll for at most that long; the fresh reads it costs
	// (the health of those not yet available) are made at most twice a second per source
	// during a wave's fan-out, whatever its size.
	planFreshToRoll = 500 * time.Millisecond
	// followAfterRestart is how recent a nudge in waves of a source must be for the
	// source to be followed after a restart: a last wave's rollout failing later than
	// that (a Deployment's progressDeadlineSeconds over an hour) is not seen then.
	followAfterRestart = time.Hour
	// maxPlans bounds the memos (and the changes announced) kept at once.
	maxPlans = 4096
	// maxReady bounds the members remembered as seen available.
	maxReady = 65536
)

// wavesGate is the one place every nudge asks whether a workload may roll to the
// change of each shared source it would take now (workloadReconciler.act, before roll).
// Where a change stands is read from the API each time (internal/waves): nothing here
// is needed to go on after a restart; what it keeps is a short memo of evaluations and
// which members were seen available.
type wavesGate struct {
	cluster  waves.Settings
	deadline time.Duration // for kinds without a deadline of their own
	cache    client.Client // the manager's: the source index (through lookups), namespaces; writes of records
	live     client.Reader
	key      func() []byte
	sources  stamp.Options
	kinds    func() []*workload.Kind
	scope    *scope.Scope
	recorder recorder.EventRecorder
	// notify is told of a halt (nil: notifications off).
	notify func(notify.Event)
	// lookups find a source's consumers in the workload caches' source index.
	lookups *consumerLookups
	// wake checks every consumer of a source (its fan-out) once a wave is done or a
	// halt lifted (nil: none; unit tests).
	wake func(ctx context.Context, kind string, key types.NamespacedName)
	// reads makes one read of a source's change at a time: the workers that find its
	// memo too old together share it.
	reads singleflight.Group

	mu        sync.Mutex
	plans     map[types.NamespacedName]*plan // by source kind/name in its namespace
	ready     map[string]bool                // namespace, change, member, uid: seen rolled and available
	announced map[string]bool                // changes whose RollingInWaves Event was made
	badLogged map[string]string              // a namespace's or source's bad waves values, as last logged
}

// plan is one evaluation of the change of one source.
type plan struct {
	at              time.Time
	kind            string
	resourceVersion string
	change          string // "configmap/shared=3f2a1c9e0b7d"
	settings        waves.Settings
	verdict         waves.Verdict
	members         []waves.Member
	firstHeld       string // waves.FirstHeld
	// pending: a member it judges rolled and is not yet available (its health may
	// fail any moment): the memo holds, but lets roll only while planFreshToRoll.
	pending bool
}

// member is the member id of the plan (nil: not a member).
func (p *plan) member(id string) *waves.Member {
	for i := range p.members {
		if p.members[i].ID == id {
			return &p.members[i]
		}
	}
	return nil
}

// inFlight reports whether the change of p rolls in waves and is neither done nor
// halted.
func (p *plan) inFlight() bool {
	return p != nil && p.verdict.Waves > 0 && p.verdict.Halted == "" && p.verdict.Current <= p.verdict.Waves
}

// waveOf is the member's wave (0: not a member).
func (p *plan) waveOf(id string) int { return waves.WaveOf(p.settings, p.members, id) }

// waveKey carries, in the context of a nudge the gate let through, the waves it rolls
// in: their RolledAnnotation entries, written by the nudge (the webhook's change cause
// and the ConfigChanged Event name them: "wave 2 of 5 for configmap/shared").
type waveKey struct{}

// waveEntries are the waves a nudge rolls in (none: not in waves).
func waveEntries(ctx context.Context) []waves.RolledEntry {
	e, _ := ctx.Value(waveKey{}).([]waves.RolledEntry)
	return e
}

// waveNote names the waves a nudge rolls in ("": none).
func waveNote(ctx context.Context) string {
	var notes []string
	for _, e := range waveEntries(ctx) {
		notes = append(notes, e.Note())
	}
	return strings.Join(notes, ", ")
}

// waveHold is the gate: "" when j may roll now (ctx then names its wave, if any); else
// the reason it is held, and when to look again. Errors fail open (it rolls, as without
// waves), logged.
func (r *workloadReconciler) waveHold(ctx context.Context, j judged) (_ context.Context, held string, retry time.Duration) {
	g := r.waves
	if g == nil {
		return ctx, "", 0
	}
	var entries []waves.RolledEntry
	stored := stamp.ParseSources(j.storedSources)
	wanted := stamp.ParseSources(j.want.SourcesAnnotation())
	id := waves.MemberID(r.kind, j.key.Name)
	for _, src := range j.refs {
		if src.Kind != stamp.KindConfigMap && src.Kind != stamp.KindSecret || stored[src.ID()] == wanted[src.ID()] {
			continue
		}
		p, err := g.evaluate(ctx, j.obj.GetNamespace(), src, planFresh)
		if err == nil && p != nil && p.pending && time.Since(p.at) >= planFreshToRoll && p.verdict.May(p.waveOf(id)) {
			// The memo lets it roll, but a member rolled before may have failed since:
			// read again (nothing more rolls once a wave fails).
			p, err = g.evaluate(ctx, j.obj.GetNamespace(), src, planFreshToRoll)
		}
		if err != nil {
			logf.FromContext(ctx).Info("Could not read where a change rolling in waves stands: rolling as without waves", "source", src.ID(), "error", err.Error())
			continue
		}
		if p == nil || p.verdict.Waves == 0 {
			continue
		}
		if m := p.member(id); m == nil || stored[src.ID()] == "" && m.Rolled {
			// Not one it rolls, or, adopted, it carries this change already (recorded
			// current): another source's change rolls it.
			continue
		}
		wave := p.waveOf(id)
		held, _ := p.verdict.Hold(wave, src.ID(), p.change)
		if held == "" {
			entries = append(entries, waves.RolledEntry{Change: p.change, Wave: wave, Waves: p.verdict.Waves, At: time.Now()})
			continue
		}
		if p.verdict.Halted != "" {
			return ctx, held, wavesHaltedRetry
		}
		retry := wavesIdleRetry
		if p.firstHeld == id {
			retry = wavesWaitRetry
		}
		return ctx, held, retry
	}
	if len(entries) > 0 {
		ctx = context.WithValue(ctx, waveKey{}, entries)
	}
	return ctx, "", 0
}

// markCurrent records, on a workload without a stamp of a source in waves (adopted)
// whose check found nothing it reads changed, that it carries the source's change
// (waves.RolledAnnotation "<change>: current"): a member of the source's waves, it
// would else never count as rolled and stall its wave. Only where the check read the
// same content as the plan (the member's digest); one metadata write per change.
func (r *workloadReconciler) markCurrent(ctx context.Context, j judged) {
	g := r.waves
	if g == nil {
		return
	}
	stored := stamp.ParseSources(j.storedSources)
	wanted := stamp.ParseSources(j.want.SourcesAnnotation())
	id := waves.MemberID(r.kind, j.key.Name)
	var adds []waves.RolledEntry
	for _, src := range j.refs {
		if src.Kind != stamp.KindConfigMap && src.Kind != stamp.KindSecret || stored[src.ID()] != "" {
			continue
		}
		p, err := g.evaluate(ctx, j.obj.GetNamespace(), src, planFresh)
		if err != nil || p == nil || p.verdict.Waves == 0 {
			continue
		}
		if m := p.member(id); m != nil && !m.Rolled && m.Digest != "" && m.Digest == wanted[src.ID()] {
			adds = append(adds, waves.RolledEntry{Change: p.change})
		}
	}
	if len(adds) == 0 {
		return
	}
	if value := rolledRecord(j.obj.GetAnnotations(), adds, consumes(j.refs)); value != "" {
		g.annotate(ctx, memberObj{kind: r.kind, key: j.key}, waves.RolledAnnotation, value)
	}
}

// consumes reports whether refs hold the source "kind/name".
func consumes(refs []stamp.Source) func(string) bool {
	return func(id string) bool {
		return slices.ContainsFunc(refs, func(s stamp.Source) bool { return s.ID() == id })
	}
}

// heldByWave reports a workload the gate holds: a metric and an Event; halted ones get
// a RolloutHalted Warning.
func (r *workloadReconciler) heldByWave(ctx context.Context, j judged, why string) {
	wavesHeld.Inc()
	checks.WithLabelValues("waves_held").Inc()
	log := logf.FromContext(ctx)
	if !strings.HasPrefix(why, "halted") {
		// Checked again every wavesWaitRetry: at debug level.
		log.V(1).Info("Held a rollout: its source's change rolls in waves", "why", why)
		return
	}
	log.Info("Held a rollout: its source's change rolling in waves halted", "why", why)
	r.recorder.Eventf(j.obj, nil, corev1.EventTypeWarning, ReasonRolloutHalted, "Hold", "Not rolling: %s", why)
}

// evaluate is where the change of src in namespace stands: nil when waves are off for
// it (read from the caches alone: the source's metadata keeps the waves annotations, the
// namespace's its labels; no live read) or the source is gone (the check holds for
// missing config elsewhere); else a memo younger than maxAge for the resourceVersion
// the watcher's cache shows, or read again.
func (g *wavesGate) evaluate(ctx context.Context, namespace string, src stamp.Source, maxAge time.Duration) (*plan, error) {
	id := types.NamespacedName{Namespace: namespace, Name: src.ID()}
	kind := stamp.SourceKindNamed(src.Kind)
	meta := kind.NewMeta()
	if err := g.cache.Get(ctx, types.NamespacedName{Namespace: namespace, Name: src.Name}, meta); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	ns, err := g.namespace(ctx, namespace)
	if err != nil {
		return nil, err
	}
	s, _ := g.settings(ns, meta.GetAnnotations())
	if !s.On {
		return nil, nil
	}
	g.mu.Lock()
	p := g.plans[id]
	g.mu.Unlock()
	if p != nil && p.resourceVersion == meta.ResourceVersion && time.Since(p.at) < maxAge {
		// Before counting consumers: every check of a wave's fan-out asks, and the count
		// walks the source's consumers (10,000 checks of 10,000 consumers: 10^8).
		return p, nil
	}
	if few, err := g.fewer(ctx, kind.Name, namespace, src.Name, max(s.Threshold, 1)); err != nil || few {
		return nil, err // below the threshold in the caches alone: no live read
	}
	prev := p
	v, err, _ := g.reads.Do(id.String(), func() (any, error) {
		p, err := g.read(ctx, ns, kind, src.Name)
		if err != nil || p == nil {
			return (*plan)(nil), err
		}
		g.mu.Lock()
		if g.plans == nil || len(g.plans) > maxPlans {
			// Bounded: a memo older than planFresh is read again anyway.
			g.plans = map[types.NamespacedName]*plan{}
		}
		g.plans[id] = p
		g.mu.Unlock()
		if g.wake != nil && advanced(prev, p) {
			// Held workloads other than the first wait to be woken (wavesIdleRetry).
			g.wake(ctx, kind.Name, types.NamespacedName{Namespace: namespace, Name: src.Name})
		}
		return p, nil
	})
	p, _ = v.(*plan)
	return p, err
}

// fewer reports whether the source kind/name has fewer than n consumers in the
// workload caches (its members are fewer still): not in waves.
func (g *wavesGate) fewer(ctx context.Context, kind, namespace, name string, n int) (bool, error) {
	count := 0
	for _, k := range g.kinds() {
		consumed, err := g.lookups.consumers(ctx, g.cache, k, namespace, indexKey(kind, namespace, name))
		if err != nil {
			return false, fmt.Errorf("list %s consumers of %s/%s: %w", k.Kind, kind, name, err)
		}
		if count += len(consumed); count >= n {
			return false, nil
		}
	}
	return true, nil
}

// advanced reports whether the change of p moved on since prev: a wave done, a halt
// lifted, or another member first held (the one before left the members, a canary
// deleted mid-wave, say: the new first held is checked again only every
// wavesIdleRetry until woken).
func advanced(prev, p *plan) bool {
	return prev != nil && prev.change == p.change && p.verdict.Halted == "" &&
		(p.verdict.Current > prev.verdict.Current || prev.verdict.Halted != "" || p.firstHeld != "" && p.firstHeld != prev.firstHeld)
}

// namespace is the metadata of the namespace from the cache (a namespaced install reads
// none: its name alone, no labels); nil when it is gone.
func (g *wavesGate) namespace(ctx context.Context, name string) (*metav1.PartialObjectMetadata, error) {
	ns, _, err := namespaceIn(ctx, g.cache, g.scope, name)
	return ns, err
}

// settings are a source's (waves.Resolve): the namespace's label and annotations from
// the metadata cache (its transform keeps a Namespace's annotations), the source's
// annotations given.
func (g *wavesGate) settings(ns *metav1.PartialObjectMetadata, annotations map[string]string) (waves.Settings, []string) {
	var labels, nsAnnotations map[string]string
	if ns != nil {
		labels, nsAnnotations = ns.Labels, ns.Annotations
	}
	return waves.Resolve(g.cluster, labels, nsAnnotations, annotations)
}

// logBad logs the bad waves values of a namespace once (not once per source of it,
// each read) and a source's once, until they change (or the bound resets the record).
func (g *wavesGate) logBad(ctx context.Context, namespace, source string, problems []string) {
	var nsBad, srcBad []string
	for _, p := range problems {
		if strings.HasPrefix(p, waves.NamespaceProblem) {
			nsBad = append(nsBad, p)
		} else {
			srcBad = append(srcBad, p)
		}
	}
	log := logf.FromContext(ctx)
	if g.newBad("namespace "+namespace, nsBad) {
		log.Info("Bad waves setting on a namespace: the level before kept", "namespace", namespace, "problems", nsBad)
	}
	if g.newBad(namespace+" "+source, srcBad) {
		log.Info("Bad waves setting on a source: the level before kept", "source", source, "problems", srcBad)
	}
}

// newBad records problems as the last of key; it reports whether they are bad values
// not logged yet.
func (g *wavesGate) newBad(key string, problems []string) bool {
	v := strings.Join(problems, "; ")
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.badLogged[key] == v {
		return false
	}
	if v == "" {
		delete(g.badLogged, key) // fixed: logged again if it turns bad again
		return false
	}
	if g.badLogged == nil || len(g.badLogged) > maxPlans {
		g.badLogged = map[string]string{}
	}
	g.badLogged[key] = v
	return true
}

// read evaluates the change of a source: its content and annotations (live), its
// consumers and canaries (the cache's index, labels) and the health of the current
// wave's workloads (the cache's, else live: health).
func (g *wavesGate) read(ctx context.Context, ns *metav1.PartialObjectMetadata, kind *stamp.SourceKind, name string) (*plan, error) {
	if ns == nil {
		return nil, nil
	}
	namespace := ns.Name
	obj := kind.New()
	if err := g.live.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, obj.(client.Object)); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	content := kind.Content(obj)
	if content == nil || stamp.Ignored(content) {
		return nil, nil
	}
	settings, problems := g.settings(ns, obj.GetAnnotations())
	g.logBad(ctx, namespace, kind.Name+"/"+name, problems)
	p := &plan{at: time.Now(), kind: kind.Name, resourceVersion: obj.GetResourceVersion(), settings: settings}
	if !settings.On {
		return p, nil
	}
	nsKey := stamp.NamespaceKey(g.key(), namespace)
	p.change = waves.ChangeOf(kind.Name, name, content, nsKey)
	members, objs, err := g.members(ctx, ns, kind.Name, name, content, nsKey, p.change)
	if err != nil {
		return nil, err
	}
	// A resume lifts a user's halt; the failures it passes are the ones `configstamp
	// resume` marked resumed on their workloads when it ran, not those of a later wave.
	verb, target := waves.ParseCommand(obj.GetAnnotations()[waves.CommandAnnotation])
	var failedNow []notify.Event // the members that failed at this evaluation
	p.verdict, p.members = waves.Plan(settings, members, verb == "halt" && target == p.change, func(m *waves.Member) {
		if at := objs[m.ID]; g.health(ctx, m, at, p.change, g.deadlineOf(settings)) {
			failedNow = append(failedNow, notify.Event{Kind: notify.Halted, Namespace: namespace, Workload: at.kind.Kind + "/" + at.key.Name,
				Change: p.change, Sources: []string{kind.Name + "/" + name}, Reason: m.Failed})
		}
	})
	p.firstHeld = waves.FirstHeld(settings, p.members, p.verdict)
	for _, m := range p.members {
		p.pending = p.pending || m.Judged && m.Rolled && !m.Ready && m.Failed == "" && !m.Resumed
	}
	if len(failedNow) > 0 {
		g.halted(ctx, obj.(client.Object), p, failedNow)
	}
	g.announce(obj.(client.Object), p)
	return p, nil
}

// members are the consumers of the source the watcher rolls: Rolled where their
// template's digest of it is the current content's for what they consume of it. Those it
// never rolls (out of its scope, opted out, paused) are not members: a wave waiting for
// them would wait for ever.
func (g *wavesGate) members(ctx context.Context, ns *metav1.PartialObjectMetadata, kind, name string, content *corev1.ConfigMap, nsKey []byte,
	change string) ([]waves.Member, map[string]memberObj, error) {
	namespace := ns.Name
	var out []waves.Member
	objs := map[string]memberObj{}
	for _, k := range g.kinds() {
		consumed, err := g.lookups.consumers(ctx, g.cache, k, namespace, indexKey(kind, namespace, name))
		if err != nil {
			return nil, nil, fmt.Errorf("list %s consumers of %s/%s: %w", k.Kind, kind, name, err)
		}
		var cs []waves.Consumer
		for _, o := range consumed {
			// The cache keeps the canary label (TrimWorkloads).
			cs = append(cs, waves.Consumer{Kind: k, Object: o, Canary: waves.IsCanary(o),
				InScope: g.scope.IncludesWorkload(namespace, ns.Labels, o.GetLabels())})
			objs[waves.MemberID(k, o.GetName())] = memberObj{kind: k, key: client.ObjectKeyFromObject(o), uid: o.GetUID(), cached: o}
		}
		out = append(out, waves.Members(kind, name, content, nsKey, change, g.sources, cs)...)
	}
	return out, objs, nil
}

// memberObj is where a member is; uid tells a workload deleted and created again under
// its name from the one before. cached is the cache's object (never to be written; nil:
// none).
type memberObj struct {
	kind   *workload.Kind
	key    types.NamespacedName
	uid    types.UID
	cached client.Object
}

// health reads a member rolled on this change: ready, or failed (its controller gave
// up, or, for a kind without a deadline of its own, it was not available within
// deadline of its rollout, as its RolledAnnotation dates it). It reads the cache's
// object when that carries the member's RolledAnnotation entry for the change: the nudge
// wrote it in the write that rolled the member, so the cache has seen that write, and
// the kind's Health waits for its controller to observe it (observedGeneration). Else
// (no entry, another UID, not cached), and before recording a failure (it halts the
// change), it reads live. A new failure is recorded on the member (it survives
// restarts); fresh reports one.
func (g *wavesGate) health(ctx context.Context, m *waves.Member, at memberObj, change string, deadline time.Duration) (fresh bool) {
	seen := at.key.Namespace + " " + change + " " + m.ID + " " + string(at.uid)
	g.mu.Lock()
	m.Ready = g.ready[seen]
	g.mu.Unlock()
	if m.Ready {
		// Seen available for this change: not judged again at every evaluation (a wave is
		// judged once it is done; after a restart, once more).
		return false
	}
	obj := at.cached
	if obj != nil {
		if _, nudged := waves.RolledFor(obj.GetAnnotations(), change); !nudged || obj.GetUID() != at.uid {
			obj = nil
		}
	}
	var h workload.Health
	if obj != nil {
		h = g.healthOf(at.kind, m, obj, deadline)
	}
	if obj == nil || h.Failed != "" {
		obj = at.kind.New()
		if err := g.live.Get(ctx, at.key, obj); err != nil {
			return false // not ready: read again at the next evaluation
		}
		h = g.healthOf(at.kind, m, obj, deadline)
	}
	m.Ready = h.Ready
	switch {
	case h.Ready && obj.GetUID() != at.uid:
		// Created again since the caches listed it: not remembered.
	case h.Ready:
		g.mu.Lock()
		if g.ready == nil || len(g.ready) > maxReady {
			g.ready = map[string]bool{} // judged again: costs reads, never a wave
		}
		g.ready[seen] = true
		g.mu.Unlock()
	}
	if h.Failed == "" {
		return false
	}
	m.Failed = waves.FailedHealth(h.Failed)
	g.annotate(ctx, at, waves.FailedAnnotation, waves.FailedRecord(m.ID, change, m.Failed))
	return true
}

// healthOf is the health of member m, obj: its kind's, failed past deadline of its
// rollout for a kind without a deadline of its own.
func (g *wavesGate) healthOf(kind *workload.Kind, m *waves.Member, obj client.Object, deadline time.Duration) workload.Health {
	h := kind.Health(obj)
	if !h.Ready && h.Failed == "" && !h.OwnDeadline && !m.Since.IsZero() && time.Since(m.Since) > deadline {
		h.Failed = fmt.Sprintf("not available within the waves deadline (%s)", deadline)
	}
	return h
}

// deadlineOf is the waves deadline of a source with settings s: its annotation's, else
// the flag's.
func (g *wavesGate) deadlineOf(s waves.Settings) time.Duration {
	if s.Deadline > 0 {
		return s.Deadline
	}
	return g.deadline
}

// deadlineIn is the waves deadline of source kind/key as the caches show it (its
// namespace's or its own annotation, up to MaxDeadline), else the flag's.
func (g *wavesGate) deadlineIn(ctx context.Context, kind string, key types.NamespacedName) time.Duration {
	meta := stamp.SourceKindNamed(kind).NewMeta()
	if err := g.cache.Get(ctx, key, meta); err != nil {
		return g.deadline
	}
	ns, err := g.namespace(ctx, key.Namespace)
	if err != nil {
		return g.deadline
	}
	s, _ := g.settings(ns, meta.GetAnnotations())
	return g.deadlineOf(s)
}

// annotate writes one annotation on a member's metadata (a record: it rolls nothing;
// the webhook keeps the template as it is).
func (g *wavesGate) annotate(ctx context.Context, at memberObj, key, value string) {
	obj := at.kind.New()
	obj.SetNamespace(at.key.Namespace)
	obj.SetName(at.key.Name)
	if err := g.cache.Patch(ctx, obj, client.RawPatch(types.MergePatchType, waves.AnnotationPatch(key, value))); err != nil {
		logf.FromContext(ctx).Info("Could not record where a change rolling in waves stands on the workload", "workload", at.key.String(),
			"annotation", key, "error", err.Error())
	}
}

// follow is when to evaluate the change of source kind/key again while it rolls (0:
// not in waves, done or halted): the last waves hold nothing whose checks would read
// their health, so a failure there is seen only this way. restarted: queued from the
// start-up list, followed only if a nudge in waves of it is recent (rolledLately).
func (g *wavesGate) follow(ctx context.Context, kind string, key types.NamespacedName, restarted bool) time.Duration {
	if restarted && !g.rolledLately(ctx, kind, key) {
		return 0
	}
	p, err := g.evaluate(ctx, key.Namespace, stamp.Source{Kind: kind, Name: key.Name}, planFresh)
	if err != nil || !p.inFlight() {
		return 0
	}
	if p.pending {
		return wavesWaitRetry
	}
	return wavesIdleRetry
}

// rolledLately reports whether a consumer of source kind/key in the caches records a
// nudge in waves of a change of it within followAfterRestart (or its waves deadline,
// the flag's, its namespace's or its own, if longer). Every other source of the start-up list is left alone: an evaluation reads
// the source live, and the health of members it rolled (from the cache where it shows
// the nudge, else live; once each after a restart), and with waves on in the cluster every source above the threshold would be
// read at each start. A held workload's own check evaluates its change anyway.
func (g *wavesGate) rolledLately(ctx context.Context, kind string, key types.NamespacedName) bool {
	id := kind + "/" + key.Name
	within := max(g.deadlineIn(ctx, kind, key), followAfterRestart)
	for _, k := range g.kinds() {
		consumed, err := g.lookups.consumers(ctx, g.cache, k, key.Namespace, indexKey(kind, key.Namespace, key.Name))
		if err != nil {
			return true // followed: reads, never a failure unseen
		}
		for _, o := range consumed {
			for _, e := range waves.ParseRolled(o.GetAnnotations()[waves.RolledAnnotation]) {
				if e.Wave > 0 && e.Source() == id && time.Since(e.At) < within {
					return true
				}
			}
		}
	}
	return false
}

// halted reports a change that halted: a RolloutHalted Warning on the source naming the
// workloads that failed, and a notification of each that failed now.
func (g *wavesGate) halted(ctx context.Context, src client.Object, p *plan, failed []notify.Event) {
	wavesHalts.Inc()
	g.recorder.Eventf(src, nil, corev1.EventTypeWarning, ReasonRolloutHalted, "Halt",
		"Change %s halted in wave %d of %d: %s; the workloads not yet rolled keep their config. Fix the config (a new change starts again from the canaries) or run `configstamp resume %s/%s`",
		p.change, p.verdict.Current, p.verdict.Waves, strings.Join(p.verdict.Failed, "; "), p.kind, src.GetName())
	logf.FromContext(ctx).Info("Halted a change rolling in waves", "change", p.change, "wave", p.verdict.Current, "failed", p.verdict.Failed)
	if g.notify == nil {
		return
	}
	for _, ev := range failed {
		ev.Reason = fmt.Sprintf("failed wave %d of %d: %s", p.verdict.Current, p.verdict.Waves, ev.Reason)
		g.notify(ev)
	}
}

// announce makes the RollingInWaves Event of a change in waves, once per change.
func (g *wavesGate) announce(src client.Object, p *plan) {
	if p.verdict.Waves == 0 || p.verdict.Current > p.verdict.Waves {
		return
	}
	g.mu.Lock()
	if g.announced == nil || len(g.announced) > maxPlans {
		// Bounded: at worst a change is announced again.
		g.announced = map[string]bool{}
	}
	seen := g.announced[src.GetNamespace()+"/"+p.change]
	g.announced[src.GetNamespace()+"/"+p.change] = true
	g.mu.Unlock()
	if seen {
		return
	}
	g.recorder.Eventf(src, nil, corev1.EventTypeNormal, ReasonRollingInWaves, "Waves",
		"Change %s rolls its %d consumers in %d waves, canaries first (docs/waves.md); `configstamp halt %s/%s` stops it",
		p.change, len(p.members), p.verdict.Waves, p.kind, src.GetName())
}
