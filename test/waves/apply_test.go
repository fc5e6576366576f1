package waves

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/deployments"
	"github.com/configstamp/configstamp/test/internal/events"
)

// kubectl runs kubectl as admin with manifest on stdin.
func kubectl(t *testing.T, manifest string, args ...string) {
	t.Helper()
	cmd := env.Command("", nil, "kubectl", args...)
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// sharedManifest is the ConfigMap shared as a user applies it: waves on, steps 1,50%.
func sharedManifest(ns, mode string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: shared
  namespace: %s
  annotations:
    configstamp.io/waves: "1,50%%"
data:
  mode: %s
`, ns, mode)
}

// deploymentManifest is a Deployment consuming shared as a user applies it; a canary
// waits an hour before a new pod counts as available (minReadySeconds), so its wave is
// still rolling when the test deletes it.
func deploymentManifest(ns, name string, canary bool) string {
	extra := ""
	if canary {
		extra = "  labels:\n    configstamp.io/canary: \"true\"\n"
	}
	minReady := 0
	if canary {
		minReady = 3600
	}
	return fmt.Sprintf(`---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[2]s
  namespace: %[1]s
%[3]sspec:
  replicas: 1
  minReadySeconds: %[4]d
  progressDeadlineSeconds: 7200
  selector:
    matchLabels: {app: %[2]s}
  template:
    metadata:
      labels: {app: %[2]s}
    spec:
      containers:
      - name: app
        image: registry.example/app:1
        envFrom:
        - configMapRef: {name: shared}
`, ns, name, extra, minReady)
}

// testApplied: objects written as real clusters write them. The ConfigMap and the
// Deployments c (canary), a0..a2 are created by `kubectl apply` (client-side: the
// last-applied annotation), s0..s2 by server-side apply with Argo CD's field manager;
// the ConfigMap is edited by `kubectl apply`. Mid-waves, while the canary's wave is
// still rolling, s2 (held) is deleted and re-created by its applier (a new UID: it is
// created on the new config, rolls no second time and stalls nothing) and the canary is
// deleted: the waves go on without it, each remaining Deployment rolled once, all
// available on the new config.
func testApplied(t *testing.T) {
	ns := nsApply
	namespace(t, ns, nil)
	csa := sharedManifest(ns, "v1") + deploymentManifest(ns, "c", true)
	ssa := ""
	for i := range 3 {
		csa += deploymentManifest(ns, fmt.Sprintf("a%d", i), false)
		ssa += deploymentManifest(ns, fmt.Sprintf("s%d", i), false)
	}
	kubectl(t, csa, "apply", "-f", "-")
	argocd := []string{"apply", "--server-side", "--field-manager=argocd-controller", "-f", "-"}
	kubectl(t, ssa, argocd...)
	names := []string{"a0", "a1", "a2", "s0", "s1", "s2"}
	allRolledOut(t, ns, append([]string{"c"}, names...))
	if d := deployments.Get(t, env.Client, ns, "a0"); d.Annotations["kubectl.kubernetes.io/last-applied-configuration"] == "" {
		t.Fatal("a0 has no last-applied annotation: not applied client-side")
	}

	kubectl(t, sharedManifest(ns, "v2"), "apply", "-f", "-")
	framework.Eventually(t, 2*time.Minute, "the canary rolled", func() error {
		return rsCountsIn(t, ns, []string{"c"}, 2, "", 0)
	})
	framework.Consistently(t, 6*time.Second, "the others held while the canary's wave rolls", func() error {
		return rsCountsIn(t, ns, names, 1, "", 0)
	})
	s2 := deployments.Get(t, env.Client, ns, "s2").UID
	kubectl(t, "", "delete", "deployment", "-n", ns, "s2", "--wait")
	kubectl(t, deploymentManifest(ns, "s2", false), argocd...)
	if deployments.Get(t, env.Client, ns, "s2").UID == s2 {
		t.Fatal("s2 not re-created")
	}
	kubectl(t, "", "delete", "deployment", "-n", ns, "c", "--wait")
	deleted := time.Now()

	v2 := hashOf(ns, map[string]string{"mode": "v2"})
	framework.Eventually(t, 4*time.Minute, "every Deployment rolled once on v2 and is available", func() error {
		if err := rsCountsIn(t, ns, names, 2, "s2", 1); err != nil {
			return err
		}
		for _, name := range names {
			d := deployments.Get(t, env.Client, ns, name)
			if h := deployments.Hash(d); h != v2 {
				return fmt.Errorf("deployment %s stamped %s, want %s", name, stamp.ShortHash(h), stamp.ShortHash(v2))
			}
			if s := d.Status; s.ObservedGeneration < d.Generation || s.UpdatedReplicas != 1 || s.AvailableReplicas != 1 || s.Replicas != 1 {
				return fmt.Errorf("deployment %s not rolled out: %+v", name, s)
			}
		}
		return nil
	})
	t.Logf("every Deployment rolled out on v2 %s after the canary was deleted", time.Since(deleted).Round(time.Second))
	framework.Consistently(t, 6*time.Second, "no Deployment rolled twice", func() error { return rsCountsIn(t, ns, names, 2, "s2", 1) })
	if err := events.Find(env.Client, ns, "shared", "RolloutHalted", ""); err == nil {
		t.Error("the change halted")
	}
}
