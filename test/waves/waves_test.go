package waves

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/waves"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/configmaps"
	"github.com/configstamp/configstamp/test/internal/deployments"
	"github.com/configstamp/configstamp/test/internal/events"
)

var bg = context.Background()

const (
	deploymentCount = 20
	canary          = "d13" // labelled: it rolls first, whatever its name
	steps           = "1,10%,50%"
)

func spec() corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1",
		EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "shared"}}}}}}}
}

func names() []string {
	var out []string
	for i := range deploymentCount {
		out = append(out, fmt.Sprintf("d%02d", i))
	}
	return out
}

// fleet creates the shared ConfigMap (waves on by its annotation), 20 Deployments (a
// short progress deadline; one labelled canary) and a StatefulSet consuming it.
func fleet(t *testing.T, ns string) {
	t.Helper()
	env.CreateNamespace(t, ns, true)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared", Annotations: map[string]string{waves.Annotation: steps}},
		Data: map[string]string{"mode": "good"}}
	if err := env.Client.Create(bg, cm); err != nil {
		t.Fatal(err)
	}
	for _, name := range names() {
		d := deployments.New(ns, name, 1, spec())
		d.Spec.ProgressDeadlineSeconds = ptr.To[int32](20)
		if name == canary {
			d.Labels = map[string]string{waves.CanaryLabel: "true"}
		}
		if err := env.Client.Create(bg, d); err != nil {
			t.Fatal(err)
		}
	}
	labels := map[string]string{"app": "s"}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"}, Spec: appsv1.StatefulSetSpec{
		Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels}, PodManagementPolicy: appsv1.ParallelPodManagement,
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec()}}}
	if err := env.Client.Create(bg, sts); err != nil {
		t.Fatal(err)
	}
}

// replicaSets are the ReplicaSets of each Deployment, oldest first, by name.
func replicaSets(t *testing.T, ns string) map[string][]appsv1.ReplicaSet {
	t.Helper()
	var list appsv1.ReplicaSetList
	if err := env.Client.List(bg, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string][]appsv1.ReplicaSet{}
	for _, rs := range list.Items {
		if ref := metav1.GetControllerOf(&rs); ref != nil {
			out[ref.Name] = append(out[ref.Name], rs)
		}
	}
	for _, v := range out {
		slices.SortFunc(v, func(a, b appsv1.ReplicaSet) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	}
	return out
}

// counts checks each Deployment's ReplicaSets (want, want+extra for the canary) and the
// StatefulSet's revisions.
func counts(t *testing.T, ns string, want, canaryWant, stsWant int) error {
	rss := replicaSets(t, ns)
	for _, name := range names() {
		w := want
		if name == canary {
			w = canaryWant
		}
		if got := len(rss[name]); got != w {
			return fmt.Errorf("deployment %s/%s has %d ReplicaSets, want %d", ns, name, got, w)
		}
	}
	if got := len(env.ControllerRevisions(t, env.StatefulSet(t, ns, "s"))); got != stsWant {
		return fmt.Errorf("statefulset %s/s has %d revisions, want %d", ns, got, stsWant)
	}
	return nil
}

// available checks every workload finished its rollout on hash and is available.
func available(t *testing.T, ns, hash string) error {
	for _, name := range names() {
		d := deployments.Get(t, env.Client, ns, name)
		if deployments.Hash(d) != hash {
			return fmt.Errorf("deployment %s stamped %s, want %s", name, stamp.ShortHash(deployments.Hash(d)), stamp.ShortHash(hash))
		}
		s := d.Status
		if s.ObservedGeneration < d.Generation || s.UpdatedReplicas != 1 || s.AvailableReplicas != 1 || s.Replicas != 1 {
			return fmt.Errorf("deployment %s not rolled out: %+v", name, s)
		}
	}
	sts := env.StatefulSet(t, ns, "s")
	if sts.Spec.Template.Annotations[stamp.HashAnnotation] != hash {
		return fmt.Errorf("statefulset s not stamped %s", stamp.ShortHash(hash))
	}
	if s := sts.Status; s.ObservedGeneration < sts.Generation || s.UpdatedReplicas != 1 || s.ReadyReplicas != 1 || s.CurrentRevision != s.UpdateRevision {
		return fmt.Errorf("statefulset s not rolled out: %+v", s)
	}
	return nil
}

// TestWaves: the scenario, both ways at once (workloads created before
// configstamp first starts in nsBefore, after in nsAfter).
func TestWaves(t *testing.T) {
	fleet(t, nsBefore)
	cs := env.Start(t, framework.Options{})
	fleet(t, nsAfter)
	good := map[string]string{}
	for _, ns := range []string{nsBefore, nsAfter} {
		good[ns] = hashOf(ns, map[string]string{"mode": "good"})
		framework.Eventually(t, 3*time.Minute, ns+": every workload rolled out once", func() error {
			if err := counts(t, ns, 1, 1, 1); err != nil {
				return err
			}
			if ns == nsBefore {
				return nil // installed over: unstamped, and rolls nothing
			}
			return available(t, ns, good[ns])
		})
	}

	// A bad change: only the canary rolls, and the change halts by its deadline.
	for _, ns := range []string{nsBefore, nsAfter} {
		configmaps.SetData(t, env.Client, ns, "shared", "mode", "bad")
	}
	for _, ns := range []string{nsBefore, nsAfter} {
		framework.Eventually(t, 3*time.Minute, ns+": RolloutHalted on the ConfigMap naming the canary", func() error {
			if err := counts(t, ns, 1, 2, 1); err != nil && rolledOnBad(t, ns) {
				t.Fatalf("%s: a workload other than the canary rolled on the bad change: %v", ns, err)
			}
			return events.Find(env.Client, ns, "shared", "RolloutHalted", "deployment/"+canary)
		})
		framework.Eventually(t, time.Minute, ns+": RolloutHalted on a held workload", func() error {
			return events.Find(env.Client, ns, "d00", "RolloutHalted", "halted")
		})
		if err := counts(t, ns, 1, 2, 1); err != nil {
			t.Fatal(err)
		}
	}
	// Held stays held: past the retry of held workloads, nothing else rolled.
	framework.Consistently(t, 15*time.Second, "only the canaries rolled on the bad change", func() error {
		for _, ns := range []string{nsBefore, nsAfter} {
			if err := counts(t, ns, 1, 2, 1); err != nil {
				return err
			}
		}
		return nil
	})

	// The fix supersedes the halted change: the canary rolls again, then each wave
	// after the one before is available. configstamp is killed mid-waves and started
	// again: it goes on, rolling none twice.
	for _, ns := range []string{nsBefore, nsAfter} {
		configmaps.SetData(t, env.Client, ns, "shared", "mode", "fixed")
	}
	framework.Eventually(t, 3*time.Minute, "the fix's second wave rolled", func() error {
		rss := replicaSets(t, nsAfter)
		if rolled := rolledOnFix(rss); rolled < 2 {
			return fmt.Errorf("%d deployments rolled on the fix", rolled)
		}
		return nil
	})
	cs.Kill()
	env.Start(t, framework.Options{})
	for _, ns := range []string{nsBefore, nsAfter} {
		fixed := hashOf(ns, map[string]string{"mode": "fixed"})
		framework.Eventually(t, 5*time.Minute, ns+": every workload rolled once on the fix and is available", func() error {
			if err := counts(t, ns, 2, 3, 2); err != nil {
				return err
			}
			return available(t, ns, fixed)
		})
		waveOrder(t, ns)
		// The first non-canary by name is wave 2 of 5 (1, 1, 3, 11, 5), and its Event says so.
		if err := events.Find(env.Client, ns, "d00", "ConfigChanged", "wave 2 of 5 for configmap/shared"); err != nil {
			t.Error(err)
		}
		// ... and so does the change cause the webhook wrote (kubectl rollout history).
		if cause := deployments.Get(t, env.Client, ns, "d00").Annotations[stamp.ChangeCauseAnnotation]; !strings.HasSuffix(cause, "(wave 2 of 5 for configmap/shared)") {
			t.Errorf("%s: d00's change cause %q does not name its wave", ns, cause)
		}
	}
	framework.Consistently(t, 10*time.Second, "no workload rolled twice", func() error {
		for _, ns := range []string{nsBefore, nsAfter} {
			if err := counts(t, ns, 2, 3, 2); err != nil {
				return err
			}
		}
		return nil
	})
}

// rolledOnFix counts the Deployments with a ReplicaSet for the fix (the canary's third,
// the others' second).
func rolledOnFix(rss map[string][]appsv1.ReplicaSet) int {
	n := 0
	for _, name := range names() {
		want := 2
		if name == canary {
			want = 3
		}
		if len(rss[name]) >= want {
			n++
		}
	}
	return n
}

// waveOrder checks the fix rolled wave by wave: every ReplicaSet of a wave was created
// no earlier than those of the waves before it (and the StatefulSet, last by name, in
// the last wave, last).
func waveOrder(t *testing.T, ns string) {
	t.Helper()
	rss := replicaSets(t, ns)
	var members []waves.Member
	for _, name := range names() {
		members = append(members, waves.Member{ID: "deployment/" + name, Canary: name == canary})
	}
	waves.Order(members)
	sizes := waves.Sizes(deploymentCount+1, 1, mustSteps(t))
	var prevLatest time.Time
	start := 0
	for w, size := range sizes {
		end := min(start+size, len(members))
		var earliest, latest time.Time
		for _, m := range members[start:end] {
			name := m.ID[len("deployment/"):]
			created := rss[name][len(rss[name])-1].CreationTimestamp.Time
			if earliest.IsZero() || created.Before(earliest) {
				earliest = created
			}
			if created.After(latest) {
				latest = created
			}
		}
		if !prevLatest.IsZero() && earliest.Before(prevLatest) {
			t.Errorf("%s: wave %d began rolling at %s, before wave %d's last rollout at %s", ns, w+1, earliest, w, prevLatest)
		}
		prevLatest, start = latest, end
	}
}

func mustSteps(t *testing.T) []waves.Step {
	s, err := waves.ParseSteps(steps)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rolledOnBad reports whether a workload other than the canary has rolled since the
// start (a second ReplicaSet or revision).
func rolledOnBad(t *testing.T, ns string) bool {
	rss := replicaSets(t, ns)
	for _, name := range names() {
		if name != canary && len(rss[name]) > 1 {
			return true
		}
	}
	return len(env.ControllerRevisions(t, env.StatefulSet(t, ns, "s"))) > 1
}
