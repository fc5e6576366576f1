package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/explain"
	"github.com/configstamp/configstamp/internal/waves"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

// TestExplainWaves changes a ConfigMap whose three consumers roll in waves: the
// canary rolls and never becomes available (no controllers here), so explain says the
// others wait for their wave and impact shows the plan (a Job that consumes it is in
// no wave); after `configstamp halt`, both say it is halted.
func TestExplainWaves(t *testing.T) {
	f := fixtures(t) // the hash key Secret exists
	env.Start(t, framework.Options{Args: append(serverArgs, "--exclude-namespaces", "kube-system,"+f.in+","+f.out)})
	ns := env.NewNamespace(t, true)
	cm := configMap(ns, "shared", map[string]string{"a": "1"})
	cm.Annotations = map[string]string{waves.Annotation: "on", waves.ThresholdAnnotation: "2"}
	if err := k8s.Create(bg, cm); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c"} {
		if err := k8s.Create(bg, deployment(ns, name, keyEnv("shared", "a"))); err != nil {
			t.Fatal(err)
		}
	}
	// A Job consumes it too: the watcher never rolls a Job, so it is in no wave.
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "j"}, Spec: batchv1.JobSpec{Template: template("j", keyEnv("shared", "a"))}}
	job.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	if err := k8s.Create(bg, job); err != nil {
		t.Fatal(err)
	}
	stamped := func(name string) string {
		return env.Deployment(t, ns, name).Spec.Template.Annotations[stamp.SourcesAnnotation]
	}
	before := stamped("a")
	if before == "" || stamped("c") == "" {
		t.Fatal("not stamped at create")
	}
	cm.Data["a"] = "2"
	if err := k8s.Update(bg, cm); err != nil {
		t.Fatal(err)
	}
	// The canary (the first by name) rolls; its pods never become available here.
	deadline := time.Now().Add(90 * time.Second)
	for stamped("a") == before {
		if time.Now().After(deadline) {
			t.Fatal("the canary deployment/a did not roll")
		}
		time.Sleep(200 * time.Millisecond)
	}
	explainB := func() explain.Report {
		var r explain.Report
		if err := json.Unmarshal([]byte(ok(t, "explain", "-n", ns, "deployment/b", "-o", "json")), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := explainB()
	if want := "held: waiting for wave 2 of 3 for configmap/shared (wave 1 rolling: deployment/a)"; r.Verdict != explain.VerdictHeldInWaves || r.Roll ||
		!strings.Contains(r.Reason, want) {
		t.Errorf("explain deployment/b: %s (roll %v): %s; want %s: %s", r.Verdict, r.Roll, r.Reason, explain.VerdictHeldInWaves, want)
	}
	// Without the hash key (the webhook's dry-run computes the digests) it says it can't tell.
	if res := run(t, "", "explain", "-n", ns, "deployment/b", "--hash-key", ""); res.code != 0 ||
		!strings.Contains(res.stderr, "a change of configmap/shared rolls in waves: whether its wave has come is not known") {
		t.Errorf("explain without the hash key: exit %d, stdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	impact := func() explain.ImpactReport {
		var ir explain.ImpactReport
		if err := json.Unmarshal([]byte(ok(t, "impact", "-n", ns, "configmap/shared", "--hash-key", keyRef, "-o", "json")), &ir); err != nil {
			t.Fatal(err)
		}
		return ir
	}
	// Without the hash key, impact shows the plan alone.
	res := run(t, "", "impact", "-n", ns, "configmap/shared", "-o", "json")
	var noKey explain.ImpactReport
	if err := json.Unmarshal([]byte(res.stdout), &noKey); res.code != 0 || err != nil || noKey.Waves == nil ||
		fmt.Sprint(noKey.Waves.Sizes) != "[1 1 1]" || noKey.Waves.Change != "" || !strings.Contains(res.stderr, "the hash key can't be read") {
		t.Errorf("impact without the hash key: exit %d, %v, waves %+v, stderr:\n%s", res.code, err, noKey.Waves, res.stderr)
	}
	// A source without waves: impact reads no hash key (a missing one goes unnoticed).
	if err := k8s.Create(bg, configMap(ns, "plain", map[string]string{"a": "1"})); err != nil {
		t.Fatal(err)
	}
	if res := run(t, "", "impact", "-n", ns, "configmap/plain", "--hash-key", ns+"/no-such-key"); res.code != 0 || strings.Contains(res.stderr, "hash key") {
		t.Errorf("impact of a source without waves read the hash key: exit %d, stderr:\n%s", res.code, res.stderr)
	}
	ir := impact()
	if p := ir.Waves; p == nil || fmt.Sprint(p.Sizes) != "[1 1 1]" || p.Current != 1 || p.Halted != "" || !strings.HasPrefix(p.Change, "configmap/shared=") {
		t.Errorf("impact waves %+v, want sizes [1 1 1], wave 1 rolling", p)
	}
	if text := ok(t, "impact", "-n", ns, "configmap/shared", "--hash-key", keyRef); !strings.Contains(text, "rolls its consumers in 3 waves") ||
		!strings.Contains(text, "is rolling: wave 1 of 3") {
		t.Errorf("impact text lacks the waves:\n%s", text)
	}

	ok(t, "halt", "-n", ns, "configmap/shared")
	// The watcher reads the command too; explain reads it live, at once.
	if r := explainB(); r.Verdict != explain.VerdictHeldInWaves || !strings.Contains(r.Reason, "halted: halted by a user") {
		t.Errorf("explain deployment/b after halt: %s: %s", r.Verdict, r.Reason)
	}
	if ir := impact(); ir.Waves == nil || !strings.Contains(ir.Waves.Halted, "halted by a user") {
		t.Errorf("impact waves %+v, want halted by a user", ir.Waves)
	}
	var got corev1.ConfigMap
	if err := k8s.Get(bg, client.ObjectKeyFromObject(cm), &got); err != nil || got.Annotations[waves.CommandAnnotation] == "" {
		t.Errorf("halt wrote no command: %v %v", err, got.Annotations)
	}
	// The watcher held deployment/b all along, as explain said.
	if s := stamped("b"); s != before {
		t.Errorf("deployment/b rolled (%s, was %s) while explain said it was held", s, before)
	}
}
