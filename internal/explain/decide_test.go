package explain

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/internal/argo"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// Without digests (no readable hash key, and the webhook's dry-run failed): a change
// of content can't be seen, unknown, not would-roll; a source deleted since the stamp
// needs no key; when the pods run config recorded after the stamp (a certain record
// that differs from it), the stamp's digests do not describe what they run: unknown.
func TestNoHashKeyRecordAfterStamp(t *testing.T) {
	d := deployment()
	d.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}}}}
	opts := stamp.Options{Secrets: true}
	refs := stamp.Consumed(d.Annotations, &d.Spec.Template.Spec, opts)
	content := map[string]*corev1.ConfigMap{"configmap/app": cm("app", map[string]string{"a": "1"}), "configmap/files": cm("files", nil), "secret/creds": cm("creds", map[string]string{"p": "x"})}
	read := func(_ context.Context, kind, name string) (*corev1.ConfigMap, error) {
		return content[kind+"/"+name], nil
	}
	full, _ := stamp.Compute(t.Context(), refs, read, make([]byte, 32))
	d.Spec.Template.Annotations = map[string]string{stamp.HashAnnotation: full.Hash, stamp.SourcesAnnotation: full.SourcesAnnotation()}
	// configmap/app changed after the stamp; the watcher recorded that the pods run it.
	content["configmap/app"] = cm("app", map[string]string{"a": "2"})
	recorded, _ := stamp.Compute(t.Context(), refs, read, make([]byte, 32))
	partial := stamp.Stamp{} // nothing digested
	explain := func(record string) Report {
		d.Annotations[stamp.ObservedAnnotation] = stamp.Observed{Hash: record, Template: stamp.TemplateFingerprint(&d.Spec.Template), Secrets: true}.String()
		return Explain(Input{Kind: workload.Deployment, Object: d, InScope: true, Options: opts, Live: Live{Stamp: partial, Content: content}})
	}
	if r := explain(full.Hash); r.Verdict != VerdictUnknown || r.Roll {
		t.Errorf("record equals the stamp, configmap/app changed: got %s %q, want unknown", r.Verdict, r.Reason)
	}
	r := explain(recorded.Hash)
	if r.Verdict != VerdictUnknown || r.Roll {
		t.Errorf("record after the stamp: got %s %q roll=%v, want unknown", r.Verdict, r.Reason, r.Roll)
	}
	if !strings.Contains(r.SourcesNote, "stamp") {
		t.Errorf("the sources table does not say its statuses are against the stamp: %q", r.SourcesNote)
	}

	// A required Secret deleted since the stamp: whether it is missing needs no key.
	// The watcher holds, with or without a ConfigMap change.
	content["secret/creds"] = nil
	if r := explain(full.Hash); r.Verdict != VerdictHeld || r.Roll {
		t.Errorf("secret deleted, configmap/app changed: got %s %q roll=%v, want held", r.Verdict, r.Reason, r.Roll)
	}
	content["configmap/app"] = cm("app", map[string]string{"a": "1"})
	if r := explain(full.Hash); r.Verdict != VerdictHeld || r.Roll {
		t.Errorf("secret deleted, configmaps unchanged: got %s %q roll=%v, want held", r.Verdict, r.Reason, r.Roll)
	}

	// Adopted (a record, no stamp): no per-source digests to compare with.
	delete(d.Spec.Template.Annotations, stamp.HashAnnotation)
	delete(d.Spec.Template.Annotations, stamp.SourcesAnnotation)
	if r := explain(full.Hash); r.Verdict != VerdictUnknown || !strings.Contains(r.Reason, "not stamped yet") {
		t.Errorf("adopted, no key: got %s %q, want unknown, not stamped yet", r.Verdict, r.Reason)
	}
}

// A workload being deleted is left alone by the watcher.
func TestDeleting(t *testing.T) {
	old := map[string]*corev1.ConfigMap{"configmap/app": cm("app", map[string]string{"a": "1"}), "configmap/files": cm("files", nil)}
	now := map[string]*corev1.ConfigMap{"configmap/app": cm("app", map[string]string{"a": "2"}), "configmap/files": cm("files", nil)}
	d := deployment()
	stamped(t, d, old)
	gone := metav1.Now()
	d.DeletionTimestamp = &gone
	if r := Explain(Input{Kind: workload.Deployment, Object: d, InScope: true, Live: live(t, d, now)}); r.Verdict != VerdictDeleting || r.Roll {
		t.Errorf("got %s %q roll=%v, want deleting", r.Verdict, r.Reason, r.Roll)
	}
}

// Impact leaves a workload being deleted alone, as the watcher does (it said a change
// rolls it).
func TestImpactDeleting(t *testing.T) {
	d := deployment()
	gone := metav1.Now()
	d.DeletionTimestamp = &gone
	r := Impact(stamp.KindConfigMap, "ns", "app", "", false, false, stamp.Options{}, []Candidate{{Kind: workload.Deployment, Object: d, InScope: true}})
	if len(r.Workloads) != 1 || r.Workloads[0].Roll || r.Workloads[0].Reason != "being deleted: configstamp leaves it alone" {
		t.Errorf("workloads: %+v, want web, not rolled: being deleted", r.Workloads)
	}
}

// Impact leaves a workload of a kind the registration does not cover alone, as explain
// does.
func TestImpactKindNotCovered(t *testing.T) {
	d := deployment()
	ro := &argo.Rollout{ObjectMeta: d.ObjectMeta, Spec: argo.RolloutSpec{Template: d.Spec.Template}}
	r := Impact(stamp.KindConfigMap, "ns", "app", "", false, false, stamp.Options{}, []Candidate{{Kind: workload.Rollout, Object: ro, InScope: true, KindNotCovered: true}})
	want := "configstamp does not cover rollouts: the server runs without --argo-rollouts (the registration's configstamp.io/covered-since has no rollouts)"
	if len(r.Workloads) != 1 || r.Workloads[0].Roll || r.Workloads[0].Reason != want {
		t.Errorf("workloads: %+v, want not rolled: %s", r.Workloads, want)
	}
}

// "Changed since, but not in a key the pods see" counts writes after the pods started
// (not after the workload's last write, which a scale or label edit moves).
func TestWrittenSincePods(t *testing.T) {
	old := map[string]*corev1.ConfigMap{"configmap/app": written(cm("app", map[string]string{"a": "1", "b": "1"}), t0), "configmap/files": written(cm("files", nil), t0)}
	now := map[string]*corev1.ConfigMap{"configmap/app": written(cm("app", map[string]string{"a": "1", "b": "2"}), t0.Add(time.Hour)), "configmap/files": old["configmap/files"]}
	for _, tc := range []struct {
		name  string
		pods  time.Time
		since bool
	}{
		{name: "written after the pods started", pods: t0.Add(time.Minute), since: true},
		{name: "written before the pods started", pods: t0.Add(2 * time.Hour)},
		{name: "same second: not counted", pods: t0.Add(time.Hour)},
	} {
		d := deployment()
		d.CreationTimestamp = metav1.NewTime(t0.Add(3 * time.Hour)) // a later write of the workload does not hide it
		stamped(t, d, old)
		r := Explain(Input{Kind: workload.Deployment, Object: d, InScope: true, Live: live(t, d, now), Times: &Times{PodsSince: tc.pods, PodsKnown: true}})
		if r.Verdict != VerdictUpToDate {
			t.Fatalf("%s: got %s %q", tc.name, r.Verdict, r.Reason)
		}
		if got := r.Sources[0].WrittenSince; got != tc.since || strings.Contains(r.Reason, "changed since") != tc.since {
			t.Errorf("%s: writtenSince %v, reason %q; want %v", tc.name, got, r.Reason, tc.since)
		}
	}
}

// Impact says what a change does to a CronJob (restamped, nothing started) and a Job
// (nothing: stamped at its creation only), as explain does; it said both roll.
func TestImpactBatch(t *testing.T) {
	d := deployment()
	cj := &batchv1.CronJob{ObjectMeta: d.ObjectMeta, Spec: batchv1.CronJobSpec{JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: d.Spec.Template}}}}
	job := &batchv1.Job{ObjectMeta: d.ObjectMeta, Spec: batchv1.JobSpec{Template: d.Spec.Template}}
	cands := []Candidate{{Kind: workload.CronJob, Object: cj, InScope: true}, {Kind: workload.Job, Object: job, InScope: true}, {Kind: workload.Deployment, Object: d, InScope: true}}
	for _, key := range []string{"", "a"} {
		r := Impact(stamp.KindConfigMap, "ns", "app", key, false, false, stamp.Options{}, cands)
		got := map[string]Consumer{}
		for _, w := range r.Workloads {
			got[w.Kind] = w
		}
		if w := got["cronjob"]; !w.Roll || !strings.HasSuffix(w.Reason, "restamps it for its next run (no Job is started)") {
			t.Errorf("key %q: cronjob %+v", key, w)
		}
		if w := got["job"]; w.Roll || !strings.Contains(w.Reason, "rolls nothing: a job is stamped at its creation only") {
			t.Errorf("key %q: job %+v", key, w)
		}
		if w := got["deployment"]; !w.Roll || !strings.HasSuffix(w.Reason, " rolls it") {
			t.Errorf("key %q: deployment %+v", key, w)
		}
	}
}
