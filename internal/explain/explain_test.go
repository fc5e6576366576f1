package explain

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// deployment consumes configmap/app (key a, by env) and configmap/files (a volume).
func deployment() *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Annotations: map[string]string{}},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{{Name: "f", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "files"}}}}},
			Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{
				ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}, Key: "a"}}}}}},
		}}},
	}
}

func cm(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: data}
}

// live computes the live stamp of d with the stamp core from content.
func live(t *testing.T, d *appsv1.Deployment, content map[string]*corev1.ConfigMap) Live {
	t.Helper()
	refs := stamp.Consumed(d.Annotations, &d.Spec.Template.Spec, stamp.Options{})
	st, err := stamp.Compute(context.Background(), refs, func(_ context.Context, kind, name string) (*corev1.ConfigMap, error) {
		return content[kind+"/"+name], nil
	}, make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	return Live{Stamp: st, Complete: true, Content: content}
}

// stamped gives d the stamp of content, and its record, as the webhook would.
func stamped(t *testing.T, d *appsv1.Deployment, content map[string]*corev1.ConfigMap) {
	st := live(t, d, content).Stamp
	d.Spec.Template.Annotations = map[string]string{stamp.HashAnnotation: st.Hash, stamp.SourcesAnnotation: st.SourcesAnnotation()}
	d.Annotations[stamp.ObservedAnnotation] = stamp.Observed{Hash: st.Hash, Template: stamp.TemplateFingerprint(&d.Spec.Template)}.String()
}

func TestVerdicts(t *testing.T) {
	old := map[string]*corev1.ConfigMap{
		"configmap/app":   cm("app", map[string]string{"a": "1", "b": "1"}),
		"configmap/files": cm("files", map[string]string{"x": "1"}),
	}
	changedB := map[string]*corev1.ConfigMap{
		"configmap/app":   cm("app", map[string]string{"a": "1", "b": "2"}),
		"configmap/files": old["configmap/files"],
	}
	changedA := map[string]*corev1.ConfigMap{
		"configmap/app":   cm("app", map[string]string{"a": "2", "b": "1"}),
		"configmap/files": old["configmap/files"],
	}
	missingApp := map[string]*corev1.ConfigMap{"configmap/app": nil, "configmap/files": old["configmap/files"]}
	for _, tc := range []struct {
		name    string
		mutate  func(d *appsv1.Deployment)
		stampOf map[string]*corev1.ConfigMap // nil: not stamped
		now     map[string]*corev1.ConfigMap
		inScope bool
		verdict string
		reason  string
		roll    bool
	}{
		{name: "up to date", stampOf: old, now: old, inScope: true, verdict: VerdictUpToDate, reason: "up to date"},
		{name: "unconsumed key changed", stampOf: old, now: changedB, inScope: true, verdict: VerdictUpToDate, reason: "up to date"},
		{name: "consumed key changed", stampOf: old, now: changedA, inScope: true, verdict: VerdictWouldRoll, reason: "configmap/app changed since the last rollout", roll: true},
		{name: "consumed key changed, paused", stampOf: old, now: changedA, inScope: true, verdict: VerdictPaused, reason: "configmap/app changed since the last rollout; but it is paused",
			mutate: func(d *appsv1.Deployment) { d.Spec.Paused = true }},
		{name: "paused, up to date", stampOf: old, now: old, inScope: true, verdict: VerdictUpToDate, reason: "up to date",
			mutate: func(d *appsv1.Deployment) { d.Spec.Paused = true }},
		{name: "required source missing", stampOf: old, now: missingApp, inScope: true, verdict: VerdictHeld, reason: "configmap/app is missing, rollout held"},
		{name: "skipped", stampOf: old, now: changedA, inScope: true, verdict: VerdictSkipped, reason: "skipped: annotation",
			mutate: func(d *appsv1.Deployment) { d.Annotations[stamp.SkipAnnotation] = "true" }},
		{name: "not in scope", stampOf: old, now: changedA, verdict: VerdictNotInScope, reason: "namespace not opted in"},
		{name: "not stamped, differs, times not read", now: changedA, inScope: true, verdict: VerdictDependsOnTimes, reason: "not stamped yet: the watcher decides from times"},
		{name: "not stamped, recorded", now: old, inScope: true, verdict: VerdictNotStamped, reason: "not stamped yet",
			mutate: func(d *appsv1.Deployment) {
				d.Annotations[stamp.ObservedAnnotation] = stamp.Observed{Hash: liveHash(t, old), Template: stamp.TemplateFingerprint(&d.Spec.Template)}.String()
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := deployment()
			if tc.stampOf != nil {
				stamped(t, d, tc.stampOf)
			}
			if tc.mutate != nil {
				tc.mutate(d)
			}
			r := Explain(Input{Kind: workload.Deployment, Object: d, InScope: tc.inScope, NamespaceLabel: stamp.InjectLabel, Live: live(t, d, tc.now)})
			if r.Verdict != tc.verdict || !strings.HasPrefix(r.Reason, tc.reason) || r.Roll != tc.roll {
				t.Errorf("got %s %q roll=%v, want %s %q roll=%v", r.Verdict, r.Reason, r.Roll, tc.verdict, tc.reason, tc.roll)
			}
		})
	}
}

func liveHash(t *testing.T, content map[string]*corev1.ConfigMap) string {
	return live(t, deployment(), content).Stamp.Hash
}

func TestSources(t *testing.T) {
	d := deployment()
	old := map[string]*corev1.ConfigMap{
		"configmap/app":   cm("app", map[string]string{"a": "1", "b": "1"}),
		"configmap/files": cm("files", map[string]string{"x": "1"}),
	}
	stamped(t, d, old)
	now := map[string]*corev1.ConfigMap{
		"configmap/app":   cm("app", map[string]string{"a": "1", "b": "2"}),
		"configmap/files": cm("files", map[string]string{"x": "2"}),
	}
	now["configmap/app"].CreationTimestamp = metav1.NewTime(time.Now())
	r := Explain(Input{Kind: workload.Deployment, Object: d, InScope: true, Live: live(t, d, now)})
	if len(r.Sources) != 2 {
		t.Fatalf("sources: %+v", r.Sources)
	}
	app, files := r.Sources[0], r.Sources[1]
	if app.ID() != "configmap/app" || app.Status != StatusUnchanged || strings.Join(app.Via, ",") != ViaKeyRef ||
		strings.Join(app.Keys, ",") != "a" || strings.Join(app.Unconsumed, ",") != "b" || app.Optional || !app.WrittenSince {
		t.Errorf("configmap/app: %+v", app)
	}
	if !strings.Contains(app.Note, "key b: pods do not see it") {
		t.Errorf("configmap/app note: %q", app.Note)
	}
	if files.Status != StatusChanged || strings.Join(files.Via, ",") != ViaVolume || !files.AllKeys || files.Stamped == files.Current {
		t.Errorf("configmap/files: %+v", files)
	}
	if r.Verdict != VerdictWouldRoll || r.Reason != "configmap/files changed since the last rollout" {
		t.Errorf("verdict %s %q", r.Verdict, r.Reason)
	}
}

func TestImpact(t *testing.T) {
	d := deployment()
	skipped := deployment()
	skipped.Name, skipped.Annotations[stamp.SkipAnnotation] = "skipped", "true"
	out := deployment()
	out.Name = "out"
	cands := []Candidate{{Kind: workload.Deployment, Object: d, InScope: true}, {Kind: workload.Deployment, Object: skipped, InScope: true}, {Kind: workload.Deployment, Object: out}}
	for _, tc := range []struct{ key, want string }{
		{"", "out:false skipped:false web:true"},
		{"a", "out:false skipped:false web:true"},
		{"b", "out:false skipped:false web:false"},
	} {
		r := Impact(stamp.KindConfigMap, "ns", "app", tc.key, false, false, stamp.Options{}, cands)
		var got []string
		for _, w := range r.Workloads {
			got = append(got, w.Name+":"+map[bool]string{true: "true", false: "false"}[w.Roll])
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("key %q: got %v, want %s", tc.key, got, tc.want)
		}
	}
}

func TestDispatchHelpers(t *testing.T) {
	d := deployment()
	d.Annotations[stamp.ExtraSourcesAnnotation] = "configmap/extra"
	d.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}}}
	got := via(d.Annotations, &d.Spec.Template.Spec, stamp.Options{})
	if strings.Join(got["configmap/app"], ",") != "envFrom,keyRef" || strings.Join(got["configmap/extra"], ",") != "extra-sources" {
		t.Errorf("via: %v", got)
	}
}

func TestEventsMerged(t *testing.T) {
	at := func(s int) metav1.Time { return metav1.NewTime(time.Date(2026, 1, 1, 0, 0, s, 0, time.UTC)) }
	evs := []corev1.Event{
		{Reason: "ConfigMissing", Type: "Warning", Message: "m", LastTimestamp: at(1), Count: 1},
		{Reason: "Scheduled", Type: "Normal", Message: "not configstamp's", LastTimestamp: at(2)},
		{Reason: "ConfigChanged", Type: "Normal", Message: "c", EventTime: metav1.NewMicroTime(at(3).Time)},
		{Reason: "ConfigMissing", Type: "Warning", Message: "m", LastTimestamp: at(4), Count: 2},
	}
	got := Events(evs)
	if len(got) != 2 || got[0].Reason != "ConfigChanged" || got[1].Reason != "ConfigMissing" || got[1].Count != 3 || !got[1].Time.Equal(at(4).Time) {
		t.Errorf("events: %+v", got)
	}
}

// Events of an earlier object of the same name (another UID) are not shown.
func TestEventsOfObject(t *testing.T) {
	d := deployment()
	d.UID = "now"
	evs := []corev1.Event{
		{Reason: "ConfigChanged", Type: "Normal", Message: "earlier object", InvolvedObject: corev1.ObjectReference{UID: "before"}},
		{Reason: "ConfigMissing", Type: "Warning", Message: "this one", InvolvedObject: corev1.ObjectReference{UID: "now"}},
	}
	r := Explain(Input{Kind: workload.Deployment, Object: d, InScope: true, Live: live(t, d, nil), Events: evs})
	if len(r.Events) != 1 || r.Events[0].Message != "this one" {
		t.Errorf("events: %+v", r.Events)
	}
}

// Past the source cap the verdict says so, whatever the config.
func TestVerdictTooManySources(t *testing.T) {
	content := map[string]*corev1.ConfigMap{"configmap/app": cm("app", map[string]string{"a": "1"}), "configmap/files": cm("files", nil)}
	d := deployment()
	r := Explain(Input{Kind: workload.Deployment, Object: d, InScope: true, NamespaceLabel: stamp.InjectLabel, Live: live(t, d, content),
		Options: stamp.Options{MaxSources: 1}})
	if r.Verdict != VerdictTooManySources || !strings.Contains(r.Reason, "2 sources, more than configstamp's cap of 1") || r.Roll {
		t.Fatalf("got %s %q roll=%v", r.Verdict, r.Reason, r.Roll)
	}
}

// A CronJob is judged by its stamp alone (its next Job copies it); a Job, stamped at its
// creation only, never rolls.
func TestVerdictsBatch(t *testing.T) {
	old := map[string]*corev1.ConfigMap{"configmap/app": cm("app", map[string]string{"a": "1"}), "configmap/files": cm("files", map[string]string{"x": "1"})}
	changed := map[string]*corev1.ConfigMap{"configmap/app": cm("app", map[string]string{"a": "2"}), "configmap/files": old["configmap/files"]}
	batch := func(k *workload.Kind, stampOf map[string]*corev1.ConfigMap) client.Object {
		d := deployment()
		if stampOf != nil {
			stamped(t, d, stampOf)
		}
		if k == workload.CronJob {
			return &batchv1.CronJob{ObjectMeta: d.ObjectMeta, Spec: batchv1.CronJobSpec{JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: d.Spec.Template}}}}
		}
		return &batchv1.Job{ObjectMeta: d.ObjectMeta, Spec: batchv1.JobSpec{Template: d.Spec.Template}}
	}
	for _, tc := range []struct {
		name      string
		kind      *workload.Kind
		stampOf   map[string]*corev1.ConfigMap
		now       map[string]*corev1.ConfigMap
		verdict   string
		reason    string
		roll      bool
		podsKnown bool
	}{
		{"CronJob up to date", workload.CronJob, old, old, VerdictUpToDate, "up to date", false, false},
		{"CronJob changed: restamped, nothing started", workload.CronJob, old, changed, VerdictWouldRoll, "its template's stamp is not the current config's", true, false},
		{"CronJob installed over: stamped", workload.CronJob, nil, old, VerdictWouldRoll, "its template's stamp is not the current config's", true, false},
		{"Job up to date", workload.Job, old, old, VerdictUpToDate, "up to date: stamped at its creation", false, true},
		{"Job changed since", workload.Job, old, changed, VerdictStampedAtCreate, "config changed since it was created", false, true},
		{"Job created before configstamp", workload.Job, nil, changed, VerdictNotStamped, "not stamped: a job is stamped at its creation only", false, true},
		// Created suspended (Kueue's are): its pods read the config when it starts.
		{"Job suspended, up to date", workload.Job, old, old, VerdictUpToDate, "up to date: stamped at its creation with the config as it is now; it has not started (suspended): its pods will read the config as it is when it starts", false, false},
		{"Job suspended, changed since", workload.Job, old, changed, VerdictStampedAtCreate, "config changed since it was created", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := batch(tc.kind, tc.stampOf)
			r := Explain(Input{Kind: tc.kind, Object: obj, InScope: true, NamespaceLabel: stamp.InjectLabel, Live: live(t, deployment(), tc.now),
				Times: &Times{PodsKnown: tc.podsKnown}})
			if r.Verdict != tc.verdict || !strings.HasPrefix(r.Reason, tc.reason) || r.Roll != tc.roll {
				t.Errorf("got %s %q roll=%v, want %s %q roll=%v", r.Verdict, r.Reason, r.Roll, tc.verdict, tc.reason, tc.roll)
			}
			if suspended := tc.kind == workload.Job && !tc.podsKnown; suspended != strings.Contains(r.Reason, "it has not started (suspended)") {
				t.Errorf("%q: says it has not started: %v, want %v", r.Reason, !suspended, suspended)
			}
			if suspended := tc.kind == workload.Job && !tc.podsKnown; suspended != strings.Contains(r.Reason, "it has not started (suspended)") {
				t.Errorf("%q: says it has not started: %v, want %v", r.Reason, !suspended, suspended)
			}
		})
	}
}
