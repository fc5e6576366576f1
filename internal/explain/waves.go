package explain

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/waves"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// VerdictHeldInWaves: the config differs, but a source's change rolls in waves
// (docs/waves.md) and the workload's wave has not come, or the change is halted.
const VerdictHeldInWaves = "held-in-waves"

// WavesPlan is how a change of a source rolls in waves (impact).
type WavesPlan struct {
	// Steps are the configured wave sizes after the canaries ("1,10%,50%").
	Steps     string `json:"steps"`
	Threshold int    `json:"threshold"`
	// Sizes are the waves' sizes for its consumers now, canaries first.
	Sizes    []int `json:"sizes"`
	Canaries int   `json:"canaries"`
	// Change names the change of its content now; Current is the wave it is in (Sizes'
	// length + 1: done) and Halted why it is halted; "" and 0 when not known (no hash key).
	Change  string `json:"change,omitempty"`
	Current int    `json:"current,omitempty"`
	Halted  string `json:"halted,omitempty"`
}

// WavesNote is what waves decide for one change a workload would roll to.
type WavesNote struct {
	// Held is "held: ..." or "halted: ..." (waves.Verdict.Hold); Note names its wave
	// when it may roll.
	Held string
	Note string
}

// applyWaves holds a workload that would roll while a change it would roll to waits in
// waves, or names its wave.
func applyWaves(r *Report, notes []WavesNote) {
	if r.Verdict != VerdictWouldRoll {
		return
	}
	var ws []string
	for _, n := range notes {
		if n.Held != "" {
			r.Verdict, r.Roll = VerdictHeldInWaves, false
			r.Reason += "; but " + n.Held
			return
		}
		ws = append(ws, n.Note)
	}
	if len(ws) > 0 {
		r.Reason += " (" + strings.Join(ws, ", ") + ")"
	}
}

// evaluated is a change of one source evaluated as the watcher's gate does.
type evaluated struct {
	settings waves.Settings
	members  []waves.Member
	verdict  waves.Verdict
	change   string // "" when the hash key is not known
	key      []byte // the namespace's hash key (nil: not known)
}

// plan returns the waves of a change of the source as it is now (nil: waves are off for
// it, or it is gone or ignored): its consumers of kinds in namespace, read live, judged
// by internal/waves as the watcher does (health from the objects as listed; a deadline
// the watcher keeps for kinds without their own is not seen). nsKey nil: the digests are
// not known, so Rolled is not either: sizes only.
func (c *Cluster) plan(ctx context.Context, kinds []*workload.Kind, ns *corev1.Namespace, nsKnown bool, namespace string,
	srcKind *stamp.SourceKind, name string, keyOf func() []byte) (*evaluated, error) {
	obj := srcKind.New()
	if err := c.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, obj.(client.Object)); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	content := srcKind.Content(obj)
	if content == nil || stamp.Ignored(content) {
		return nil, nil
	}
	var labels, nsAnnotations map[string]string
	if ns != nil {
		labels, nsAnnotations = ns.Labels, ns.Annotations
	}
	e := &evaluated{}
	var problems []string
	e.settings, problems = waves.Resolve(c.Waves, labels, nsAnnotations, obj.GetAnnotations())
	for _, p := range problems {
		c.warn("%s/%s: bad waves setting: %s", srcKind.Name, name, p)
	}
	if !e.settings.On {
		return nil, nil
	}
	nsKey := keyOf() // read only for a source whose changes roll in waves
	e.key = nsKey
	if nsKey != nil {
		e.change = waves.ChangeOf(srcKind.Name, name, content, nsKey)
	}
	opts := c.options(c.Secrets)
	// The kinds the watcher rolls: never a Job (created once, never nudged).
	kinds = workload.Watched(kinds)
	var cs []waves.Consumer
	objs := map[string]waves.Consumer{} // by member ID
	unknown := 0
	for _, k := range kinds {
		list := k.NewList()
		if err := c.Client.List(ctx, list, client.InNamespace(namespace)); err != nil {
			if apimeta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("list %s: %w", k.Resource, err)
		}
		for _, o := range k.Items(list) {
			tmpl := k.Template(o)
			if tmpl == nil || !slices.ContainsFunc(stamp.Consumed(o.GetAnnotations(), &tmpl.Spec, opts), func(s stamp.Source) bool {
				return s.Kind == srcKind.Name && s.Name == name
			}) {
				continue
			}
			in, unsure := c.inScope(ns, nsKnown, o)
			if unsure {
				unknown++
			}
			c := waves.Consumer{Kind: k, Object: o, InScope: in, Canary: waves.IsCanary(o)}
			cs = append(cs, c)
			objs[waves.MemberID(k, o.GetName())] = c
		}
	}
	if unknown > 0 {
		c.warn("%s/%s rolls in waves: whether %d of its consumers are in scope is not known (namespace %s unreadable): its waves are counted without them",
			srcKind.Name, name, unknown, namespace)
	}
	e.members = waves.Members(srcKind.Name, name, content, nsKey, e.change, opts, cs)
	verb, target := waves.ParseCommand(obj.GetAnnotations()[waves.CommandAnnotation])
	ready := func(m *waves.Member) {
		c, ok := objs[m.ID]
		if !ok {
			return
		}
		h := c.Kind.Health(c.Object)
		m.Ready = h.Ready
		if h.Failed != "" {
			m.Failed = waves.FailedHealth(h.Failed)
		}
	}
	if nsKey == nil {
		ready = nil // Rolled is not known: where it stands is not either
	}
	e.verdict, e.members = waves.Plan(e.settings, e.members, e.change != "" && verb == "halt" && target == e.change, ready)
	return e, nil
}

// wavesPlan is the impact report's WavesPlan of e (nil: not in waves).
func wavesPlan(e *evaluated) *WavesPlan {
	if e == nil || e.verdict.Waves == 0 {
		return nil
	}
	canaries := 0
	steps := make([]string, 0, len(e.settings.Steps))
	for _, m := range e.members {
		if m.Canary {
			canaries++
		}
	}
	for _, s := range e.settings.Steps {
		if s.Percent {
			steps = append(steps, fmt.Sprintf("%d%%", s.N))
		} else {
			steps = append(steps, fmt.Sprint(s.N))
		}
	}
	p := &WavesPlan{Steps: strings.Join(steps, ","), Threshold: e.settings.Threshold, Canaries: canaries,
		Sizes: waves.Sizes(len(e.members), canaries, e.settings.Steps), Change: e.change}
	if e.change != "" {
		p.Current, p.Halted = e.verdict.Current, e.verdict.Halted
	}
	return p
}

// wavesNotes are what waves decide for the workload id, for each source whose change it
// would roll to (changed: its stamped digest differs from the current one).
func (c *Cluster) wavesNotes(ctx context.Context, ns *corev1.Namespace, nsKnown bool, id string, r Report, nsKey []byte) []WavesNote {
	if r.Verdict != VerdictWouldRoll {
		return nil
	}
	var out []WavesNote
	for _, s := range r.Sources {
		if !wavesGated(s) {
			continue
		}
		kind := stamp.SourceKindNamed(s.Kind)
		e, err := c.plan(ctx, workload.All(), ns, nsKnown, r.Namespace, kind, s.Name, func() []byte { return nsKey })
		if err != nil {
			c.warn("whether %s rolls in waves is not known: %v", s.ID(), err)
			continue
		}
		if e == nil || e.verdict.Waves == 0 {
			continue
		}
		if nsKey == nil {
			c.warn("a change of %s rolls in waves: whether its wave has come is not known without the hash key (--hash-key)", s.ID())
			continue
		}
		wave := waves.WaveOf(e.settings, e.members, id)
		if wave == 0 {
			continue // not one the watcher rolls
		}
		held, note := e.verdict.Hold(wave, s.ID(), e.change)
		out = append(out, WavesNote{Held: held, Note: note})
	}
	return out
}

// wavesFailed says when the workload failed its wave of the current change of a source
// it consumes (its waves.FailedAnnotation, not resumed): that change is halted.
func (c *Cluster) wavesFailed(ctx context.Context, ns *corev1.Namespace, nsKnown bool, obj client.Object, r *Report, nsKey []byte) {
	record := obj.GetAnnotations()[waves.FailedAnnotation]
	if record == "" || nsKey == nil {
		return
	}
	for _, s := range r.Sources {
		if s.Kind != stamp.KindConfigMap && s.Kind != stamp.KindSecret || !strings.Contains(record, "@"+s.ID()+"=") {
			continue
		}
		e, err := c.plan(ctx, workload.All(), ns, nsKnown, r.Namespace, stamp.SourceKindNamed(s.Kind), s.Name, func() []byte { return nsKey })
		if err != nil || e == nil || e.change == "" {
			continue
		}
		if why, _ := waves.ParseFailed(record, e.change); why != "" {
			r.Reason += fmt.Sprintf("; it failed its wave of change %s (%s): the change is halted (docs/waves.md: fix the config, or `configstamp resume %s`)",
				e.change, why, s.ID())
		}
	}
}

// wavesGated reports whether the watcher's gate asks the waves of s before it rolls: a
// ConfigMap or Secret whose digest now is not the one stamped (changed, added, or a
// template without per-source digests; watcher waveHold).
func wavesGated(s Source) bool {
	if s.Kind != stamp.KindConfigMap && s.Kind != stamp.KindSecret {
		return false
	}
	return s.Status == StatusChanged || s.Status == StatusAdded || s.Status == StatusNotStamped && s.Stamped != s.Current
}

// impactWaves adds to r the waves a change of its source rolls in, and each consumer's.
func (c *Cluster) impactWaves(ctx context.Context, kinds []*workload.Kind, ns *corev1.Namespace, nsKnown bool, r *ImpactReport) {
	// The hash key Secret is read only when a change of the source rolls in waves.
	keyOf := func() []byte {
		if k := c.hashKey(ctx); k != nil {
			return stamp.NamespaceKey(k, r.Namespace)
		}
		return nil
	}
	e, err := c.plan(ctx, kinds, ns, nsKnown, r.Namespace, stamp.SourceKindNamed(r.Kind), r.Name, keyOf)
	if err != nil {
		c.warn("whether a change of it rolls in waves is not known: %v", err)
		return
	}
	if r.Waves = wavesPlan(e); r.Waves == nil {
		return
	}
	if e.key == nil {
		c.warn("the hash key can't be read: where a change of it stands in its waves is not shown")
	}
	for i := range r.Workloads {
		w := &r.Workloads[i]
		if wave := waves.WaveOf(e.settings, e.members, w.Kind+"/"+w.Name); wave > 0 && w.Roll {
			w.Reason += fmt.Sprintf(", in wave %d of %d", wave, e.verdict.Waves)
		}
	}
}
