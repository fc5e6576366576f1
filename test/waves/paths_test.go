package waves

import (
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/waves"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/configmaps"
	"github.com/configstamp/configstamp/test/internal/deployments"
	"github.com/configstamp/configstamp/test/internal/events"
)

// pathsDeadline is the --waves-deadline of TestWavePaths: short, so a DaemonSet that
// never becomes available halts its change soon.
const pathsDeadline = 30 * time.Second

// TestWavePaths: the paths TestWaves does not take, each in its own namespace, in
// parallel, under one configstamp process started as the chart starts it with Secrets
// on (--secrets), with Argo Rollouts (--argo-rollouts) and a short --waves-deadline,
// and no --waves flag: waves are off for the cluster.
func TestWavePaths(t *testing.T) {
	if err := env.InstallCRDs(bg, framework.ArgoRolloutsCRD()); err != nil {
		t.Fatal(err)
	}
	env.Start(t, framework.Options{Args: []string{"--secrets", "--argo-rollouts", "--waves-deadline", pathsDeadline.String()}})
	// Each in a goroutine of its own rather than t.Parallel, which runs only GOMAXPROCS
	// at once: they spend their time waiting on the control plane.
	var wg sync.WaitGroup
	for name, f := range map[string]func(*testing.T){
		"namespace-label":   testNamespaceLabel,
		"secret-annotation": testSecretAnnotation,
		"off":               testWavesOff,
		"daemonset-rollout": testDaemonSetRollout,
		"deadline":          testDeadline,
		"applied":           testApplied,
	} {
		wg.Go(func() { t.Run(name, f) })
	}
	wg.Wait()
}

// namespace creates an opted-in namespace with extra labels.
func namespace(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{stamp.InjectLabel: stamp.InjectValue}}}
	for k, v := range labels {
		ns.Labels[k] = v
	}
	if err := env.Client.Create(bg, ns); err != nil {
		t.Fatal(err)
	}
}

// createDeployments creates Deployments d00..d<n-1> running spec, with a short progress
// deadline; canary ("" none) is labelled canary.
func createDeployments(t *testing.T, ns string, n int, spec corev1.PodSpec, canary string) []string {
	t.Helper()
	var out []string
	for i := range n {
		name := fmt.Sprintf("d%02d", i)
		d := deployments.New(ns, name, 1, spec)
		d.Spec.ProgressDeadlineSeconds = ptr.To[int32](20)
		if name == canary {
			d.Labels = map[string]string{waves.CanaryLabel: "true"}
		}
		if err := env.Client.Create(bg, d); err != nil {
			t.Fatal(err)
		}
		out = append(out, name)
	}
	return out
}

// rsCountsIn checks that each of names has want ReplicaSets, the canary canaryWant.
func rsCountsIn(t *testing.T, ns string, names []string, want int, canary string, canaryWant int) error {
	rss := replicaSets(t, ns)
	for _, name := range names {
		w := want
		if name == canary {
			w = canaryWant
		}
		if got := len(rss[name]); got != w {
			return fmt.Errorf("deployment %s/%s has %d ReplicaSets, want %d", ns, name, got, w)
		}
	}
	return nil
}

// haltsAtCanary: after a bad change of source, only the canary rolls and the change halts
// when the canary does not become available (its progress deadline): RolloutHalted on
// the source names it, the others keep their one ReplicaSet.
func haltsAtCanary(t *testing.T, ns, source string, names []string, canary string) {
	t.Helper()
	framework.Eventually(t, 3*time.Minute, ns+": RolloutHalted on "+source+" naming the canary", func() error {
		for _, name := range names {
			if n := len(replicaSets(t, ns)[name]); name != canary && n > 1 {
				t.Fatalf("%s: deployment %s rolled on the bad change (%d ReplicaSets): the change did not roll in waves", ns, name, n)
			}
		}
		return events.Find(env.Client, ns, source, "RolloutHalted", "deployment/"+canary)
	})
	framework.Consistently(t, 8*time.Second, ns+": only the canary rolled", func() error {
		return rsCountsIn(t, ns, names, 1, canary, 2)
	})
}

// allRolledOut waits until every one of names has n ReplicaSets.
func allRolledOut(t *testing.T, ns string, names []string) {
	t.Helper()
	framework.Eventually(t, 2*time.Minute, ns+": every Deployment rolled out", func() error {
		return rsCountsIn(t, ns, names, 1, "", 0)
	})
}

// testNamespaceLabel: waves switched on by the namespace's label alone (no flag, no
// annotation on the ConfigMap): a bad change rolls the canary (no label: the first by
// name) and halts.
func testNamespaceLabel(t *testing.T) {
	ns := nsLabel
	namespace(t, ns, map[string]string{waves.Annotation: "on"})
	configmaps.Create(t, env.Client, ns, "shared", map[string]string{"mode": "good"}, nil)
	names := createDeployments(t, ns, 6, spec(), "")
	allRolledOut(t, ns, names)
	configmaps.SetData(t, env.Client, ns, "shared", "mode", "bad")
	haltsAtCanary(t, ns, "shared", names, "d00")
}

// secretSpec consumes the Secret shared (envFrom).
func secretSpec() corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1",
		EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "shared"}}}}}}}
}

// testSecretAnnotation: waves switched on by the annotation of a Secret: a bad change
// rolls the labelled canary alone and halts.
func testSecretAnnotation(t *testing.T) {
	ns := nsSecret
	namespace(t, ns, nil)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared", Annotations: map[string]string{waves.Annotation: "on"}},
		StringData: map[string]string{"mode": "good"}}
	if err := env.Client.Create(bg, sec); err != nil {
		t.Fatal(err)
	}
	names := createDeployments(t, ns, 6, secretSpec(), "d03")
	allRolledOut(t, ns, names)
	if err := env.Client.Patch(bg, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared"}},
		client.RawPatch(types.MergePatchType, []byte(`{"stringData":{"mode":"bad"}}`))); err != nil {
		t.Fatal(err)
	}
	haltsAtCanary(t, ns, "shared", names, "d03")
}

// testWavesOff: with waves off (no flag, no label, no annotation) a change of a
// ConfigMap with 20 consumers rolls all 20 at once, as before waves: a bad change rolls
// every one, though none of their new pods becomes ready, and nothing speaks of waves.
func testWavesOff(t *testing.T) {
	ns := nsOff
	namespace(t, ns, nil)
	configmaps.Create(t, env.Client, ns, "shared", map[string]string{"mode": "good"}, nil)
	names := createDeployments(t, ns, deploymentCount, spec(), "")
	allRolledOut(t, ns, names)
	configmaps.SetData(t, env.Client, ns, "shared", "mode", "bad")
	bad := hashOf(ns, badData)
	framework.Eventually(t, 3*time.Minute, ns+": every Deployment rolled on the bad change", func() error {
		if err := rsCountsIn(t, ns, names, 2, "", 0); err != nil {
			return err
		}
		for _, name := range names {
			if h := deployments.Hash(deployments.Get(t, env.Client, ns, name)); h != bad {
				return fmt.Errorf("deployment %s stamped %s, want %s", name, stamp.ShortHash(h), stamp.ShortHash(bad))
			}
		}
		return nil
	})
	for _, reason := range []string{"RollingInWaves", "RolloutHalted"} {
		if err := events.Find(env.Client, ns, "shared", reason, ""); err == nil {
			t.Errorf("%s: a %s Event on the ConfigMap with waves off", ns, reason)
		}
	}
}
