package explain

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/internal/decide"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// written is c created at t0 and last written at at (its managed fields' time), as an
// edit leaves it.
func written(c *corev1.ConfigMap, at time.Time) *corev1.ConfigMap {
	c = c.DeepCopy()
	c.CreationTimestamp = metav1.NewTime(t0)
	if at.After(t0) {
		c.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Time: &metav1.Time{Time: at}}}
	}
	return c
}

// Without a certain basis the watcher decides from times (shouldRoll): explain does
// too, and shows them.
func TestVerdictFromTimes(t *testing.T) {
	oldApp := written(cm("app", map[string]string{"a": "1"}), t0)
	newApp := written(cm("app", map[string]string{"a": "2"}), t0.Add(time.Hour))
	files := written(cm("files", map[string]string{"x": "1"}), t0)
	old := map[string]*corev1.ConfigMap{"configmap/app": oldApp, "configmap/files": files}
	now := map[string]*corev1.ConfigMap{"configmap/app": newApp, "configmap/files": files}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", CreationTimestamp: metav1.NewTime(t0)}}
	coverage := map[string]time.Time{"deployments": t0.Add(time.Minute)}
	lateCoverage := map[string]time.Time{"deployments": t0.Add(2 * time.Hour)}
	for _, tc := range []struct {
		name      string
		stamp     bool
		created   time.Time
		pods      time.Time
		coverage  map[string]time.Time
		rollStale bool
		verdict   string
		reason    string
		roll      bool
	}{
		// A stamp made for another template: the pods started before the config was
		// written: roll; after: recorded.
		{name: "stamp, config newer", stamp: true, pods: t0.Add(30 * time.Minute), coverage: coverage, verdict: VerdictWouldRoll, roll: true},
		{name: "stamp, pods newer", stamp: true, pods: t0.Add(2 * time.Hour), coverage: coverage, verdict: VerdictUpToDate},
		{name: "stamp, tie rolls", stamp: true, pods: t0.Add(time.Hour), coverage: coverage, verdict: VerdictWouldRoll, roll: true},
		// Unstamped, predating configstamp's coverage: recorded even if config is newer
		// than its pods, unless that config was written after the coverage too (owed).
		{name: "unstamped, installed over", created: t0, pods: t0.Add(30 * time.Minute), coverage: lateCoverage, verdict: VerdictNotStamped},
		{name: "unstamped, installed over, roll stale", created: t0, pods: t0.Add(30 * time.Minute), coverage: lateCoverage, rollStale: true, verdict: VerdictWouldRoll, roll: true},
		{name: "unstamped, installed over, config written since coverage and pods", created: t0, pods: t0.Add(30 * time.Minute), coverage: coverage,
			verdict: VerdictWouldRoll, roll: true, reason: "owed a rollout"},
		{name: "unstamped, installed over, config written since coverage, pods later", created: t0, pods: t0.Add(2 * time.Hour), coverage: coverage, verdict: VerdictNotStamped},
		{name: "unstamped, bypassed the webhook", created: t0.Add(10 * time.Minute), pods: t0.Add(30 * time.Minute), coverage: coverage, verdict: VerdictWouldRoll, roll: true},
		{name: "unstamped, bypassed, pods newer", created: t0.Add(10 * time.Minute), pods: t0.Add(2 * time.Hour), coverage: coverage, verdict: VerdictNotStamped},
		{name: "unstamped, registration unreadable", created: t0.Add(10 * time.Minute), pods: t0.Add(30 * time.Minute), verdict: VerdictDependsOnTimes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := deployment()
			d.CreationTimestamp = metav1.NewTime(tc.created)
			if tc.stamp {
				stamped(t, d, old)
				d.Spec.Template.Spec.Containers[0].Image = "changed-without-the-webhook"
			}
			times := &Times{PodsSince: tc.pods, PodsKnown: true, Coverage: tc.coverage, Namespace: ns, NamespaceIncluded: true}
			r := Explain(Input{Kind: workload.Deployment, Object: d, InScope: true, Live: live(t, d, now), Times: times, RollStale: tc.rollStale})
			if r.Verdict != tc.verdict || r.Roll != tc.roll {
				t.Errorf("got %s %q roll=%v, want %s roll=%v", r.Verdict, r.Reason, r.Roll, tc.verdict, tc.roll)
			}
			if !strings.Contains(r.Reason, tc.reason) {
				t.Errorf("reason %q, want it to say %q", r.Reason, tc.reason)
			}
			if r.Evidence == nil || r.Evidence.PodsSince == nil && tc.verdict != VerdictNotStamped {
				t.Errorf("evidence not shown: %+v", r.Evidence)
			}
		})
	}
}

// Every source now ignored: the watcher rolls once to drop the stamp; up to date only
// when the basis is empty too.
func TestAllIgnored(t *testing.T) {
	old := map[string]*corev1.ConfigMap{"configmap/app": cm("app", map[string]string{"a": "1"}), "configmap/files": cm("files", nil)}
	ignored := map[string]*corev1.ConfigMap{}
	for k, c := range old {
		c = c.DeepCopy()
		c.Annotations = map[string]string{stamp.IgnoreAnnotation: "true"}
		ignored[k] = c
	}
	d := deployment()
	stamped(t, d, old)
	d.Annotations[stamp.ObservedAnnotation] = stamp.Observed{Hash: d.Spec.Template.Annotations[stamp.HashAnnotation], Template: stamp.TemplateFingerprint(&d.Spec.Template)}.String()
	r := Explain(Input{Kind: workload.Deployment, Object: d, InScope: true, Live: live(t, d, ignored)})
	if r.Verdict != VerdictWouldRoll || !r.Roll {
		t.Errorf("stamped, all ignored now: got %s %q, want would-roll", r.Verdict, r.Reason)
	}
	u := deployment()
	r = Explain(Input{Kind: workload.Deployment, Object: u, InScope: true, Live: live(t, u, ignored)})
	if r.Verdict != VerdictUpToDate || r.Roll {
		t.Errorf("unstamped, all ignored: got %s %q, want up-to-date", r.Verdict, r.Reason)
	}
}

// Secret digests not compared, a required ConfigMap missing: held, as the watcher does.
func TestHeldWithoutHashKey(t *testing.T) {
	d := deployment()
	d.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}}}}
	opts := stamp.Options{Secrets: true}
	refs := stamp.Consumed(d.Annotations, &d.Spec.Template.Spec, opts)
	content := map[string]*corev1.ConfigMap{"configmap/app": cm("app", map[string]string{"a": "1"}), "configmap/files": cm("files", nil), "secret/creds": cm("creds", map[string]string{"p": "x"})}
	full, _ := stamp.Compute(t.Context(), refs, func(_ context.Context, kind, name string) (*corev1.ConfigMap, error) {
		return content[kind+"/"+name], nil
	}, make([]byte, 32))
	d.Spec.Template.Annotations = map[string]string{stamp.HashAnnotation: full.Hash, stamp.SourcesAnnotation: full.SourcesAnnotation()}
	d.Annotations[stamp.ObservedAnnotation] = stamp.Observed{Hash: full.Hash, Template: stamp.TemplateFingerprint(&d.Spec.Template), Secrets: true}.String()
	var cms []stamp.Source
	for _, r := range refs {
		if r.Kind != stamp.KindSecret {
			cms = append(cms, r)
		}
	}
	content["configmap/app"] = nil
	partial, _ := stamp.Compute(t.Context(), cms, func(_ context.Context, kind, name string) (*corev1.ConfigMap, error) {
		return content[kind+"/"+name], nil
	}, nil)
	r := Explain(Input{Kind: workload.Deployment, Object: d, InScope: true, Options: opts, Live: Live{Stamp: partial, Content: content}})
	if r.Verdict != VerdictHeld || r.Roll {
		t.Errorf("got %s %q roll=%v, want held", r.Verdict, r.Reason, r.Roll)
	}
}

// A rollout whose stamp would not fit the annotation size limit: too-large, as the
// watcher leaves it alone.
func TestTooLarge(t *testing.T) {
	old := map[string]*corev1.ConfigMap{"configmap/app": cm("app", map[string]string{"a": "1"}), "configmap/files": cm("files", nil)}
	now := map[string]*corev1.ConfigMap{"configmap/app": cm("app", map[string]string{"a": "2"}), "configmap/files": cm("files", nil)}
	d := deployment()
	stamped(t, d, old)
	d.Spec.Template.Annotations["big"] = strings.Repeat("x", stamp.AnnotationSizeLimit-len(d.Spec.Template.Annotations[stamp.SourcesAnnotation])-200)
	d.Annotations[stamp.ObservedAnnotation] = stamp.Observed{Hash: d.Spec.Template.Annotations[stamp.HashAnnotation], Template: stamp.TemplateFingerprint(&d.Spec.Template)}.String()
	r := Explain(Input{Kind: workload.Deployment, Object: d, InScope: true, Live: live(t, d, now)})
	if r.Verdict != VerdictWouldRoll {
		t.Fatalf("fits: got %s %q", r.Verdict, r.Reason)
	}
	d.Spec.Template.Annotations["big"] += strings.Repeat("x", 200)
	d.Annotations[stamp.ObservedAnnotation] = stamp.Observed{Hash: d.Spec.Template.Annotations[stamp.HashAnnotation], Template: stamp.TemplateFingerprint(&d.Spec.Template)}.String()
	r = Explain(Input{Kind: workload.Deployment, Object: d, InScope: true, Live: live(t, d, now)})
	if r.Verdict != VerdictTooLarge || r.Roll {
		t.Errorf("too large: got %s %q roll=%v", r.Verdict, r.Reason, r.Roll)
	}
}

// impact --key of a binaryData key: env and envFrom don't see it.
func TestImpactBinaryKey(t *testing.T) {
	d := deployment() // configmap/app by keyRef
	cands := []Candidate{{Kind: workload.Deployment, Object: d, InScope: true}}
	r := Impact(stamp.KindConfigMap, "ns", "app", "a", false, true, stamp.Options{}, cands)
	if r.Workloads[0].Roll {
		t.Errorf("binaryData key via env: %+v", r.Workloads[0])
	}
}

// An installed-over workload whose sources could not all be read is decided before its
// pods' time is read: the words say so, without that time.
func TestVerdictInstalledOverConfigUnknown(t *testing.T) {
	for _, d := range []decide.Decision{
		{Action: decide.Unknown, Unknown: []string{decide.EvidenceConfig}},
		{Action: decide.Unknown, Unknown: []string{decide.EvidencePods}},
	} {
		for _, ev := range []*Evidence{nil, {}} {
			code, reason, roll := byTimes(d, &Report{Evidence: ev})
			if code != VerdictDependsOnTimes || roll || reason == "" {
				t.Errorf("%v, evidence %v: got %s %q roll=%v", d.Unknown, ev, code, reason, roll)
			}
		}
	}
}

// A workload whose controller keeps its older pods (OnDelete) says how many still run
// the old config, and which, from its record.
func TestPodsBehind(t *testing.T) {
	old := strings.Repeat("ab", 32)
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 2},
		Spec:   appsv1.StatefulSetSpec{UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 1}}
	s.Annotations = map[string]string{stamp.ObservedAnnotation: stamp.Observed{Hash: strings.Repeat("cd", 32),
		Template: stamp.TemplateFingerprint(&s.Spec.Template), Behind: old}.String()}
	if got := podsBehind(Input{Kind: workload.StatefulSet, Object: s}); !strings.Contains(got, "2 of 3 pods still on the old config ("+stamp.ShortHash(old)+")") {
		t.Errorf("got %q", got)
	}
	s.Status.UpdatedReplicas = 3
	if got := podsBehind(Input{Kind: workload.StatefulSet, Object: s}); got != "" {
		t.Errorf("all replaced: got %q", got)
	}
}
