package waves

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/argo"
	"github.com/configstamp/configstamp/internal/waves"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/configmaps"
	"github.com/configstamp/configstamp/test/internal/events"
)

// sharedWithWaves creates the ConfigMap shared in ns, waves on with steps and threshold.
func sharedWithWaves(t *testing.T, ns, steps, threshold string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared",
		Annotations: map[string]string{waves.Annotation: steps, waves.ThresholdAnnotation: threshold}}, Data: map[string]string{"mode": "good"}}
	if err := env.Client.Create(bg, cm); err != nil {
		t.Fatal(err)
	}
}

// createDaemonSet creates the DaemonSet ds consuming shared, the canary of its source.
func createDaemonSet(t *testing.T, ns string) {
	t.Helper()
	labels := map[string]string{"app": "ds"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ds", Labels: map[string]string{waves.CanaryLabel: "true"}},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec()}}}
	if err := env.Client.Create(bg, ds); err != nil {
		t.Fatal(err)
	}
}

// dsRevisions is how many ControllerRevisions the DaemonSet ds has.
func dsRevisions(t *testing.T, ns string) int {
	return len(env.ControllerRevisions(t, env.DaemonSet(t, ns, "ds")))
}

// createRollout creates an Argo Rollout of one replica consuming shared.
func createRollout(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	labels := map[string]string{"app": name}
	r := &argo.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: argo.RolloutSpec{Replicas: ptr.To[int32](1),
		Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec()}}}
	if err := c.Create(bg, r); err != nil {
		t.Fatal(err)
	}
}

// rolloutGeneration reads a Rollout's generation (one per template change: nothing else
// writes its spec here).
func rolloutGeneration(t *testing.T, c client.Client, ns, name string) int64 {
	t.Helper()
	var r argo.Rollout
	if err := c.Get(bg, client.ObjectKey{Namespace: ns, Name: name}, &r); err != nil {
		t.Fatal(err)
	}
	return r.Generation
}

// writeRolloutStatus writes a Rollout's status as the Argo Rollouts controller does
// (rollout/sync.go, utils/rollout CalculateRolloutPhase, v1.9) for its current
// generation: there is no Argo controller here, so the test plays it. phase is Healthy
// (every replica updated and available), Progressing (the new ReplicaSet's pod not yet
// available) or Degraded (its progressDeadlineSeconds passed: ProgressDeadlineExceeded).
func writeRolloutStatus(t *testing.T, c client.Client, ns, name, phase string) {
	t.Helper()
	gen := rolloutGeneration(t, c, ns, name)
	podHash := fmt.Sprintf("%x", 0x5d6f8c7b00+gen) // the new ReplicaSet's rollouts-pod-template-hash
	now := time.Now().UTC().Format(time.RFC3339)
	cond := func(typ, status, reason, msg string) map[string]any {
		return map[string]any{"type": typ, "status": status, "reason": reason, "message": msg, "lastUpdateTime": now, "lastTransitionTime": now}
	}
	st := map[string]any{"observedGeneration": strconv.FormatInt(gen, 10), "phase": phase, "replicas": 1, "HPAReplicas": 1,
		"currentPodHash": podHash, "selector": "app=" + name, "stableRS": podHash, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1}
	switch phase {
	case "Healthy":
		st["message"] = ""
		st["conditions"] = []any{cond("Available", "True", "AvailableReason", "Rollout has minimum availability"),
			cond("Progressing", "True", "NewReplicaSetAvailable", fmt.Sprintf("ReplicaSet %q has successfully progressed.", name+"-"+podHash)),
			cond("Healthy", "True", "RolloutHealthy", "Rollout is healthy")}
	case "Progressing":
		st["message"] = "updated replicas are still becoming available"
		st["stableRS"] = fmt.Sprintf("%x", 0x5d6f8c7b00+gen-1)
		st["replicas"], st["readyReplicas"], st["availableReplicas"] = 2, 1, 1
		st["conditions"] = []any{cond("Available", "True", "AvailableReason", "Rollout has minimum availability"),
			cond("Progressing", "True", "ReplicaSetUpdated", fmt.Sprintf("ReplicaSet %q is progressing.", name+"-"+podHash)),
			cond("Healthy", "False", "RolloutHealthy", "Rollout is not healthy")}
	case "Degraded":
		msg := fmt.Sprintf("ReplicaSet %q has timed out progressing.", name+"-"+podHash)
		st["message"] = "ProgressDeadlineExceeded: " + msg
		st["stableRS"] = fmt.Sprintf("%x", 0x5d6f8c7b00+gen-1)
		st["replicas"], st["readyReplicas"], st["availableReplicas"] = 2, 1, 1
		st["conditions"] = []any{cond("Available", "True", "AvailableReason", "Rollout has minimum availability"),
			cond("Progressing", "False", "ProgressDeadlineExceeded", msg),
			cond("Healthy", "False", "RolloutHealthy", "Rollout is not healthy")}
	}
	b, err := json.Marshal(map[string]any{"status": st})
	if err != nil {
		t.Fatal(err)
	}
	r := &argo.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := c.Status().Patch(bg, r, client.RawPatch(types.MergePatchType, b)); err != nil {
		t.Fatalf("write status of rollout %s: %v", name, err)
	}
}

// testDaemonSetRollout: a DaemonSet and Argo Rollouts as members. Steps 1,1: waves of
// one, the DaemonSet (canary) first, then r1, r2, r3. A good change rolls the
// DaemonSet, which becomes available by its updated and ready counts on the kwok nodes;
// then r1, held behind it while Progressing, passes once Healthy; r2 rolls and goes
// Degraded: the change halts, r3 keeps its template.
func testDaemonSetRollout(t *testing.T) {
	ns := nsKinds
	namespace(t, ns, nil)
	c := env.ArgoClient(t)
	sharedWithWaves(t, ns, "1,1", "2")
	createDaemonSet(t, ns)
	rollouts := []string{"r1", "r2", "r3"}
	for _, name := range rollouts {
		createRollout(t, c, ns, name)
		writeRolloutStatus(t, c, ns, name, "Healthy")
	}
	env.DaemonSetRolledOut(t, ns, "ds")
	gens := func(want ...int64) error {
		for i, name := range rollouts {
			if got := rolloutGeneration(t, c, ns, name); got != want[i] {
				return fmt.Errorf("rollout %s at generation %d, want %d", name, got, want[i])
			}
		}
		return nil
	}

	configmaps.SetData(t, env.Client, ns, "shared", "mode", "good2")
	framework.Eventually(t, 2*time.Minute, "the DaemonSet rolled, then r1", func() error {
		if n := dsRevisions(t, ns); n != 2 {
			return fmt.Errorf("daemonset ds has %d revisions, want 2", n)
		}
		return gens(2, 1, 1)
	})
	env.DaemonSetRolledOut(t, ns, "ds")
	writeRolloutStatus(t, c, ns, "r1", "Progressing")
	framework.Consistently(t, 8*time.Second, "r2 held while r1 progresses", func() error { return gens(2, 1, 1) })
	writeRolloutStatus(t, c, ns, "r1", "Healthy")
	framework.Eventually(t, time.Minute, "r2 rolled once r1 was Healthy", func() error { return gens(2, 2, 1) })
	writeRolloutStatus(t, c, ns, "r2", "Progressing")
	writeRolloutStatus(t, c, ns, "r2", "Degraded")
	framework.Eventually(t, time.Minute, "RolloutHalted naming rollout/r2", func() error {
		if err := gens(2, 2, 1); err != nil {
			t.Fatalf("after r2 went Degraded: %v", err)
		}
		return events.Find(env.Client, ns, "shared", "RolloutHalted", "rollout/r2 did not become available: Argo Rollouts reports it Degraded")
	})
	framework.Consistently(t, 8*time.Second, "r3 held: the change halted", func() error { return gens(2, 2, 1) })
	if n := dsRevisions(t, ns); n != 2 {
		t.Errorf("daemonset ds has %d revisions, want 2", n)
	}
}

// testDeadline: --waves-deadline for a kind whose controller has no deadline of its own:
// a bad change rolls the DaemonSet (canary), whose new pods never become ready; the
// change halts once it was not available for the deadline (30s), and the Deployments of
// the next waves keep their ReplicaSet.
func testDeadline(t *testing.T) {
	ns := nsDeadline
	namespace(t, ns, nil)
	sharedWithWaves(t, ns, "1", "2")
	createDaemonSet(t, ns)
	names := createDeployments(t, ns, 2, spec(), "")
	env.DaemonSetRolledOut(t, ns, "ds")
	allRolledOut(t, ns, names)
	configmaps.SetData(t, env.Client, ns, "shared", "mode", "bad")
	// The deadline counts from when the watcher first saw the DaemonSet rolled, not
	// before its template was stamped.
	bad := hashOf(ns, badData)
	framework.Eventually(t, 2*time.Minute, "the DaemonSet stamped with the bad config", func() error {
		if h := env.DaemonSet(t, ns, "ds").Spec.Template.Annotations[stamp.HashAnnotation]; h != bad {
			return fmt.Errorf("daemonset ds stamped %s, want %s", stamp.ShortHash(h), stamp.ShortHash(bad))
		}
		return nil
	})
	rolled := time.Now()
	framework.Eventually(t, 3*time.Minute, "RolloutHalted naming daemonset/ds past the waves deadline", func() error {
		if err := rsCountsIn(t, ns, names, 1, "", 0); err != nil {
			t.Fatalf("a Deployment rolled before the DaemonSet was available: %v", err)
		}
		return events.Find(env.Client, ns, "shared", "RolloutHalted", "daemonset/ds did not become available: not available within the waves deadline ("+pathsDeadline.String()+")")
	})
	if waited := time.Since(rolled); waited < pathsDeadline-2*time.Second {
		t.Errorf("halted %s after the DaemonSet rolled, before the waves deadline (%s)", waited.Round(time.Second), pathsDeadline)
	}
	if n := dsRevisions(t, ns); n != 2 {
		t.Errorf("daemonset ds has %d revisions, want 2", n)
	}
	if st := env.DaemonSet(t, ns, "ds").Status; st.NumberReady >= st.DesiredNumberScheduled {
		t.Errorf("daemonset ds ready (%+v): the bad config was not bad", st)
	}
	framework.Consistently(t, 8*time.Second, "the Deployments held: the change halted", func() error { return rsCountsIn(t, ns, names, 1, "", 0) })
}
