package waves

import (
	"fmt"
	"os/exec"
	"strings"
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

// cli runs `configstamp ARGS -n nsCLI` as the admin user (a user's own credentials).
func cli(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(env.Binary, append(args, "-n", nsCLI, "--kubeconfig", env.Cluster.Kubeconfig)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("configstamp %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// rsCounts checks the ReplicaSets of e00..e05 (want[i] each).
func rsCounts(t *testing.T, want ...int) error {
	rss := replicaSets(t, nsCLI)
	for i, w := range want {
		name := fmt.Sprintf("e%02d", i)
		if got := len(rss[name]); got != w {
			return fmt.Errorf("deployment %s has %d ReplicaSets, want %d", name, got, w)
		}
	}
	return nil
}

// TestHaltResume: `configstamp resume` continues a halted change (a later wave can halt
// it again); `configstamp halt` stops a change before it rolls anything, and resume lets
// it roll wave by wave, each workload once, up to its last wave, which fails: that
// failure is recorded and reported too (nothing is held, so only the source's follow
// reads it). Six Deployments, steps 1,50%: waves of 1 (the canary e00), 1, 3, 1 (e05,
// which also reads the ConfigMap extra: its pods of the fix never become Ready).
func TestHaltResume(t *testing.T) {
	env.Start(t, framework.Options{})
	env.CreateNamespace(t, nsCLI, true)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: nsCLI, Name: "shared",
		Annotations: map[string]string{waves.Annotation: "1,50%", waves.ThresholdAnnotation: "3"}}, Data: map[string]string{"mode": "good"}}
	if err := env.Client.Create(bg, cm); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(bg, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: nsCLI, Name: "extra"}, Data: lastData}); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		sp := spec()
		if i == 5 {
			sp.Containers[0].EnvFrom = append(sp.Containers[0].EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "extra"}}})
		}
		d := deployments.New(nsCLI, fmt.Sprintf("e%02d", i), 1, sp)
		d.Spec.ProgressDeadlineSeconds = ptr.To[int32](20)
		if err := env.Client.Create(bg, d); err != nil {
			t.Fatal(err)
		}
	}
	framework.Eventually(t, 2*time.Minute, "every Deployment rolled out", func() error { return rsCounts(t, 1, 1, 1, 1, 1, 1) })

	// A bad change halts at the canary; resume rolls the next wave, which fails too.
	configmaps.SetData(t, env.Client, nsCLI, "shared", "mode", "bad")
	framework.Eventually(t, 3*time.Minute, "the bad change halted at the canary", func() error {
		return events.Find(env.Client, nsCLI, "shared", "RolloutHalted", "deployment/e00")
	})
	if err := rsCounts(t, 2, 1, 1, 1, 1, 1); err != nil {
		t.Fatal(err)
	}
	if out := cli(t, "resume", "configmap/shared"); !strings.Contains(out, "resumed: configmap/shared change configmap/shared=") {
		t.Fatalf("resume: %s", out)
	}
	framework.Eventually(t, 3*time.Minute, "resumed: wave 2 rolled, failed and halted the change again", func() error {
		if err := events.Find(env.Client, nsCLI, "shared", "RolloutHalted", "deployment/e01"); err != nil {
			return err
		}
		return rsCounts(t, 2, 2, 1, 1, 1, 1)
	})
	// Halted again, for good: the resume on the source passes no later failure. A write
	// of the source's metadata has every consumer checked at once (held ones wait a
	// minute while halted).
	if err := env.Client.Patch(bg, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: nsCLI, Name: "shared"}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"example.com/touched":"1"}}}`))); err != nil {
		t.Fatal(err)
	}
	framework.Consistently(t, 10*time.Second, "wave 3 did not roll after wave 2 failed", func() error { return rsCounts(t, 2, 2, 1, 1, 1, 1) })

	// The fix, halted before it rolls anything: nothing rolls until it is resumed.
	fix := fixData
	digest := stamp.SourceDigest(stamp.Source{Kind: stamp.KindConfigMap, Name: "shared", AllKeys: true, Binary: true},
		&corev1.ConfigMap{Data: fix}, stamp.NamespaceKey(framework.HashKey, nsCLI)).Hex()[:12]
	change := "configmap/shared=" + digest
	if out := cli(t, "halt", "configmap/shared", "--change", change); !strings.Contains(out, "halted: configmap/shared change "+change) {
		t.Fatalf("halt: %s", out)
	}
	configmaps.SetData(t, env.Client, nsCLI, "shared", "mode", "fixed")
	framework.Eventually(t, time.Minute, "the halted fix holds its consumers", func() error {
		return events.Find(env.Client, nsCLI, "e00", "RolloutHalted", "halted by a user")
	})
	framework.Consistently(t, 10*time.Second, "nothing rolled on the halted fix", func() error { return rsCounts(t, 2, 2, 1, 1, 1, 1) })
	// Resume names the fix itself: the newest Event on the source names it.
	if out := cli(t, "resume", "configmap/shared"); !strings.Contains(out, change) {
		t.Fatalf("resume of the fix: %s", out)
	}
	fixed := hashOf(nsCLI, fix)
	framework.Eventually(t, 3*time.Minute, "the fix rolled, each Deployment once more", func() error {
		if err := rsCounts(t, 3, 3, 2, 2, 2, 2); err != nil {
			return err
		}
		for i := range 5 {
			d := deployments.Get(t, env.Client, nsCLI, fmt.Sprintf("e%02d", i))
			if deployments.Hash(d) != fixed || d.Status.AvailableReplicas != 1 || d.Status.UpdatedReplicas != 1 || d.Status.Replicas != 1 {
				return fmt.Errorf("deployment %s not rolled out on the fix: %+v", d.Name, d.Status)
			}
		}
		return nil
	})
	// The last wave (e05) fails: recorded on it, reported on the source, and explain says so.
	framework.Eventually(t, 3*time.Minute, "the last wave's failure recorded and reported", func() error {
		d := deployments.Get(t, env.Client, nsCLI, "e05")
		if v := d.Annotations[waves.FailedAnnotation]; !strings.Contains(v, "deployment/e05@"+change+": ") {
			return fmt.Errorf("e05's failure record: %q", v)
		}
		return events.Find(env.Client, nsCLI, "shared", "RolloutHalted", "deployment/e05")
	})
	if out := cli(t, "explain", "deployment/e05", "--hash-key", framework.HashKeyRef); !strings.Contains(out, "failed its wave of change "+change) {
		t.Errorf("explain deployment/e05 does not say it failed its wave:\n%s", out)
	}
}
