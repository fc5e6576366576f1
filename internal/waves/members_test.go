package waves

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// consumerOf is a Deployment named name that reads key a of configmap/shared, stamped
// with digest ("" none).
func consumerOf(name, digest string) *appsv1.Deployment {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "c", Env: []corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{
		ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "shared"}, Key: "a"}}}}}}
	if digest != "" {
		d.Spec.Template.Annotations = map[string]string{stamp.SourcesAnnotation: "configmap/shared=" + digest}
	}
	return d
}

func TestMembers(t *testing.T) {
	key := stamp.NamespaceKey([]byte(strings.Repeat("k", 32)), "ns")
	content := &corev1.ConfigMap{Data: map[string]string{"a": "2", "b": "unseen"}}
	src := stamp.Source{Kind: stamp.KindConfigMap, Name: "shared", Keys: []string{"a"}, Required: true}
	now := stamp.SourceDigest(src, content, key).Hex()[:12]
	change := ChangeOf(stamp.KindConfigMap, "shared", content, key)
	if !strings.HasPrefix(change, "configmap/shared=") || len(change) != len("configmap/shared=")+12 {
		t.Fatalf("ChangeOf = %q", change)
	}
	failed := consumerOf("failed", now)
	failed.Annotations = map[string]string{FailedAnnotation: FailedRecord("deployment/failed", change, "did not become available: x")}
	old := consumerOf("resumed", "000000000000")
	old.Annotations = map[string]string{FailedAnnotation: FailedRecord("deployment/resumed", change, "")}
	skipped := consumerOf("skipped", "")
	skipped.Annotations = map[string]string{stamp.SkipAnnotation: "true"}
	paused := consumerOf("paused", "")
	paused.Spec.Paused = true
	at := time.Date(2026, 12, 5, 21, 0, 0, 0, time.UTC)
	// Rolled by the watcher's nudge in wave 2 for this change: judged by its health.
	judged := consumerOf("judged", now)
	judged.Annotations = map[string]string{RolledAnnotation: RolledEntry{Change: change, Wave: 2, Waves: 3, At: at}.String()}
	// Its record names an earlier change: it carries this one without having rolled
	// on it (only untouched keys changed): not judged, done.
	earlier := consumerOf("earlier", now)
	earlier.Annotations = map[string]string{RolledAnnotation: RolledEntry{Change: "configmap/shared=000000000000", Wave: 1, Waves: 3, At: at}.String()}
	// Created again under its name from a manifest that kept the record of the one
	// before: the record is not of its rollout.
	recreated := consumerOf("recreated", now)
	recreated.Annotations = judged.Annotations
	recreated.CreationTimestamp = metav1.NewTime(at.Add(time.Minute))
	// Adopted (no stamp of the source): rolled only once recorded current for the change.
	adopted := consumerOf("adopted", "")
	current := consumerOf("current", "")
	current.Annotations = map[string]string{RolledAnnotation: RolledEntry{Change: change}.String()}
	dk := workload.Deployment
	got := Members(stamp.KindConfigMap, "shared", content, key, change, stamp.Options{}, []Consumer{
		{Kind: dk, Object: consumerOf("rolled", now), InScope: true, Canary: true},
		{Kind: dk, Object: consumerOf("stale", "000000000000"), InScope: true},
		{Kind: dk, Object: failed, InScope: true},
		{Kind: dk, Object: old, InScope: true},
		{Kind: dk, Object: skipped, InScope: true},
		{Kind: dk, Object: paused, InScope: true},
		{Kind: dk, Object: consumerOf("outside", ""), InScope: false},
		{Kind: dk, Object: judged, InScope: true},
		{Kind: dk, Object: earlier, InScope: true},
		{Kind: dk, Object: recreated, InScope: true},
		{Kind: dk, Object: adopted, InScope: true},
		{Kind: dk, Object: current, InScope: true},
	})
	want := []Member{
		{ID: "deployment/rolled", Canary: true, Rolled: true, Ready: true, Digest: now},
		{ID: "deployment/stale", Digest: now},
		{ID: "deployment/failed", Rolled: true, Ready: true, Failed: "did not become available: x", Digest: now},
		{ID: "deployment/resumed", Resumed: true, Digest: now},
		{ID: "deployment/judged", Rolled: true, Judged: true, Since: at, Digest: now},
		{ID: "deployment/earlier", Rolled: true, Ready: true, Digest: now},
		{ID: "deployment/recreated", Rolled: true, Ready: true, Digest: now},
		{ID: "deployment/adopted", Digest: now},
		{ID: "deployment/current", Rolled: true, Ready: true, Digest: now},
	}
	if len(got) != len(want) {
		t.Fatalf("Members = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("member %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestResolve: each level over the one before: flags < namespace label < namespace
// annotations < source annotations; a bad value is a problem and the level before applies.
func TestResolve(t *testing.T) {
	cluster := Settings{Threshold: 5, Deadline: time.Minute}
	for _, c := range []struct {
		name            string
		label, nsa, src map[string]string
		on              bool
		threshold       int
		steps, bads     int
		deadline        time.Duration
	}{
		{name: "off", threshold: 5, steps: 3, deadline: time.Minute},
		{name: "namespace label on", label: map[string]string{Annotation: "on"}, on: true, threshold: 5, steps: 3, deadline: time.Minute},
		{name: "source over namespace", label: map[string]string{Annotation: "on"}, src: map[string]string{Annotation: "off"}, threshold: 5, steps: 3, deadline: time.Minute},
		{name: "source steps", src: map[string]string{Annotation: "2,50%", ThresholdAnnotation: "2"}, on: true, threshold: 2, steps: 2, deadline: time.Minute},
		{name: "bad kept out", label: map[string]string{Annotation: "on"}, src: map[string]string{Annotation: "x"}, on: true, threshold: 5, steps: 3, bads: 1, deadline: time.Minute},
		{name: "namespace annotations", nsa: map[string]string{Annotation: "2,50%", ThresholdAnnotation: "3", DeadlineAnnotation: "10m"},
			on: true, threshold: 3, steps: 2, deadline: 10 * time.Minute},
		{name: "namespace annotation over its label", label: map[string]string{Annotation: "on"}, nsa: map[string]string{Annotation: "off"},
			threshold: 5, steps: 3, deadline: time.Minute},
		{name: "namespace annotation steps, label off", label: map[string]string{Annotation: "off"}, nsa: map[string]string{Annotation: "1,20%"},
			on: true, threshold: 5, steps: 2, deadline: time.Minute},
		{name: "source over namespace annotations", nsa: map[string]string{Annotation: "2,50%", ThresholdAnnotation: "3", DeadlineAnnotation: "10m"},
			src: map[string]string{Annotation: "1", ThresholdAnnotation: "1", DeadlineAnnotation: "2m"}, on: true, threshold: 1, steps: 1, deadline: 2 * time.Minute},
		{name: "source off over namespace steps", nsa: map[string]string{Annotation: "2,50%"}, src: map[string]string{Annotation: "off"},
			threshold: 5, steps: 2, deadline: time.Minute},
		{name: "bad namespace annotations: the label and flags apply", label: map[string]string{Annotation: "on"},
			nsa: map[string]string{Annotation: "often", ThresholdAnnotation: "-1", DeadlineAnnotation: "1s"}, on: true, threshold: 5, steps: 3, bads: 3, deadline: time.Minute},
		{name: "bad namespace deadline: the flag's", nsa: map[string]string{Annotation: "on", DeadlineAnnotation: "25h"}, on: true, threshold: 5, steps: 3, bads: 1, deadline: time.Minute},
		{name: "a namespace label sets no deadline", label: map[string]string{Annotation: "on", DeadlineAnnotation: "5m"}, on: true, threshold: 5, steps: 3, deadline: time.Minute},
	} {
		s, problems := Resolve(cluster, c.label, c.nsa, c.src)
		if s.On != c.on || s.Threshold != c.threshold || len(s.Steps) != c.steps || len(problems) != c.bads || s.Deadline != c.deadline {
			t.Errorf("%s: %+v %v", c.name, s, problems)
		}
	}
	_, problems := Resolve(cluster, nil, map[string]string{ThresholdAnnotation: "many"}, map[string]string{ThresholdAnnotation: "x"})
	if len(problems) != 2 || !strings.HasPrefix(problems[0], "namespace: ") || strings.HasPrefix(problems[1], "namespace: ") {
		t.Errorf("problems %q: want the namespace's named, then the source's", problems)
	}
}

func TestHold(t *testing.T) {
	v := Verdict{Waves: 3, Current: 2, Waiting: []string{"deployment/b"}}
	if held, note := v.Hold(2, "configmap/shared", "c"); held != "" || note != "wave 2 of 3 for configmap/shared" {
		t.Errorf("wave 2: %q %q", held, note)
	}
	if held, _ := v.Hold(3, "configmap/shared", "c"); held != "held: waiting for wave 3 of 3 for configmap/shared (wave 2 rolling: deployment/b)" {
		t.Errorf("wave 3: %q", held)
	}
	v.Halted = "deployment/b did not become available: x"
	if held, _ := v.Hold(2, "configmap/shared", "configmap/shared=abc"); held != "halted: deployment/b did not become available: x (change configmap/shared=abc)" {
		t.Errorf("halted: %q", held)
	}
}

// TestMembersNoKey: without the hash key, Rolled is not known (false); no panic.
func TestMembersNoKey(t *testing.T) {
	got := Members(stamp.KindConfigMap, "shared", &corev1.ConfigMap{Data: map[string]string{"a": "1"}}, nil, "", stamp.Options{},
		[]Consumer{{Kind: workload.Deployment, Object: consumerOf("a", "000000000000"), InScope: true}})
	if len(got) != 1 || got[0].Rolled {
		t.Errorf("Members without a key = %+v", got)
	}
}
