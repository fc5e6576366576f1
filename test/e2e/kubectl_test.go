package e2e

import (
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

const kubectlManifests = `apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  mode: blue
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: svc
spec:
  replicas: 2
  selector:
    matchLabels: {app: svc}
  template:
    metadata:
      labels: {app: svc}
    spec:
      containers:
      - name: svc
        image: registry.example/svc:1.0
        volumeMounts:
        - {name: settings, mountPath: /etc/svc}
      volumes:
      - name: settings
        configMap: {name: settings}
`

// TestKubectlOutsideGit: edits made by hand, with kubectl edit and kubectl apply, roll
// once each.
func TestKubectlOutsideGit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ns := env.NewNamespace(t, true)
	kubectl := func(extraEnv []string, args ...string) string {
		return tool(t, dir, extraEnv, "kubectl", append([]string{"--namespace", ns}, args...)...)
	}
	writeFile(t, filepath.Join(dir, "app.yaml"), kubectlManifests)
	kubectl(nil, "apply", "-f", "app.yaml")
	first := expectReplicaSets(t, ns, "svc", 1)

	// kubectl edit, with sed as the editor.
	kubectl([]string{"KUBE_EDITOR=sed -i s/mode:\\ blue/mode:\\ green/"}, "edit", "configmap", "settings")
	edited := expectReplicaSets(t, ns, "svc", 2)
	if hashOf(edited) == hashOf(first) {
		t.Fatal("stamp unchanged after kubectl edit")
	}
	audited(t, ns, "svc", cluster.ConfigstampUser, hashOf(first), hashOf(edited))

	// kubectl apply of a changed ConfigMap.
	writeFile(t, filepath.Join(dir, "cm.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  mode: red\n")
	kubectl(nil, "apply", "-f", "cm.yaml")
	applied := expectReplicaSets(t, ns, "svc", 3)
	audited(t, ns, "svc", cluster.ConfigstampUser, hashOf(edited), hashOf(applied))
}

// TestKustomizeGenerator: kubectl apply -k of a configMapGenerator without name suffix
// hash and a changed literal rolls once.
func TestKustomizeGenerator(t *testing.T) {
	t.Parallel()
	dir := copyTestdata(t)
	kdir := filepath.Join(dir, "kustomize")
	ns := env.NewNamespace(t, true)
	tool(t, kdir, nil, "kubectl", "--namespace", ns, "apply", "-k", ".")
	first := expectReplicaSets(t, ns, "web", 1)

	writeFile(t, filepath.Join(kdir, "kustomization.yaml"), `resources:
- deployment.yaml
configMapGenerator:
- name: web-config
  literals:
  - GREETING=bonjour
generatorOptions:
  disableNameSuffixHash: true
`)
	tool(t, kdir, nil, "kubectl", "--namespace", ns, "apply", "-k", ".")
	changed := expectReplicaSets(t, ns, "web", 2)
	if hashOf(changed) == hashOf(first) {
		t.Fatal("stamp unchanged after a generator literal change")
	}
	audited(t, ns, "web", cluster.ConfigstampUser, hashOf(first), hashOf(changed))
}

// TestNoFightsWithDeployTools: a repeated server-side apply keeps the stamp and rolls
// nothing; kubectl rollout restart rolls exactly once and keeps the stamp.
func TestNoFightsWithDeployTools(t *testing.T) {
	t.Parallel()
	ns, kubectl := kubectlApp(t)
	kubectl("apply", "--server-side", "-f", "app.yaml")
	first := expectReplicaSets(t, ns, "svc", 1)
	if hashOf(first) == "" {
		t.Fatal("not stamped on a server-side apply")
	}
	kubectl("apply", "--server-side", "-f", "app.yaml")
	again := expectReplicaSets(t, ns, "svc", 1)
	if hashOf(again) != hashOf(first) || again.Generation != first.Generation {
		t.Fatalf("second server-side apply: generation %d -> %d, hash %s -> %s", first.Generation, again.Generation, short(hashOf(first)), short(hashOf(again)))
	}

	kubectl("rollout", "restart", "deployment/svc")
	restarted := expectReplicaSets(t, ns, "svc", 2)
	if hashOf(restarted) != hashOf(first) {
		t.Fatalf("rollout restart changed the stamp: %s -> %s", short(hashOf(first)), short(hashOf(restarted)))
	}
}

// TestRolloutHistory: `kubectl rollout history` names configstamp's rollout and its
// cause (the source, its old and new digest), and not the next rollout, made by someone
// else. A Deployment adopted while running (recorded, not stamped) and then rolled by a
// config change gets its first stamp, from the config its record says its pods ran.
func TestRolloutHistory(t *testing.T) {
	t.Parallel()
	t.Run("stamped", func(t *testing.T) {
		t.Parallel()
		ns, kubectl := kubectlApp(t)
		kubectl("apply", "-f", "app.yaml")
		first := expectReplicaSets(t, ns, "svc", 1)
		kubectl("patch", "configmap", "settings", "--type", "merge", "-p", `{"data":{"mode":"green"}}`)
		edited := expectReplicaSets(t, ns, "svc", 2)
		kubectl("set", "image", "deployment/svc", "svc=registry.example/svc:2.0")
		expectReplicaSets(t, ns, "svc", 3)
		expectCauses(t, kubectl, map[string]string{
			"1": "<none>",
			"2": fmt.Sprintf("configstamp: configmap/settings changed (digest %s -> %s; keys: mode)", sourcesOf(first)["configmap/settings"], sourcesOf(edited)["configmap/settings"]),
			"3": "<none>",
		})
	})
	t.Run("adopted", func(t *testing.T) {
		t.Parallel()
		ns, kubectl := kubectlAppIn(t, false)
		kubectl("apply", "-f", "app.yaml")
		expectReplicaSets(t, ns, "svc", 1)
		// Past the ConfigMap's creation burst (a workload that comes into scope while a
		// write of its config is pending is rolled when the burst ends), the running
		// Deployment is opted in: recorded, not stamped, not rolled.
		framework.Eventually(t, 30*time.Second, "ConfigMap settings quiet", func() error {
			for _, rec := range cs.Logs() {
				if rec["msg"] == "Source quiet; checking its dependents" && rec["namespace"] == ns && rec["name"] == "settings" && rec["kind"] == "Deployment" {
					return nil
				}
			}
			return fmt.Errorf("no hand-on logged")
		})
		kubectl("label", "deployment/svc", stamp.InjectLabel+"="+stamp.InjectValue)
		var ran string
		framework.Eventually(t, time.Minute, "record of svc", func() error {
			d := deployment(t, ns, "svc")
			rec, ok := stamp.ObservedFor(d.Annotations, &d.Spec.Template)
			if !ok || hashOf(d) != "" {
				return fmt.Errorf("record %q, stamp %q: want a record and no stamp", d.Annotations[stamp.ObservedAnnotation], hashOf(d))
			}
			ran = rec.Hash
			return nil
		})
		expectReplicaSets(t, ns, "svc", 1)
		kubectl("patch", "configmap", "settings", "--type", "merge", "-p", `{"data":{"mode":"green"}}`)
		edited := expectReplicaSets(t, ns, "svc", 2)
		expectCauses(t, kubectl, map[string]string{
			"1": "<none>",
			"2": fmt.Sprintf("configstamp: config changed (config hash %s -> %s); first stamp (configmap/settings %s)",
				short(ran), short(hashOf(edited)), sourcesOf(edited)["configmap/settings"]),
		})
	})
}

// expectCauses compares the change causes `kubectl rollout history` shows for
// deployment/svc, by revision, with want.
func expectCauses(t *testing.T, kubectl func(args ...string) string, want map[string]string) {
	t.Helper()
	causes := map[string]string{} // by revision
	for _, line := range strings.Split(kubectl("rollout", "history", "deployment/svc"), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] != "REVISION" {
			causes[f[0]] = strings.Join(f[1:], " ")
		}
	}
	if !maps.Equal(causes, want) {
		t.Fatalf("rollout history causes %v, want %v", causes, want)
	}
}

// kubectlApp gives a test an opted-in namespace and kubectl in a directory holding
// app.yaml (kubectlManifests).
func kubectlApp(t *testing.T) (string, func(args ...string) string) { return kubectlAppIn(t, true) }

// kubectlAppIn is kubectlApp in a namespace opted in or not.
func kubectlAppIn(t *testing.T, optIn bool) (string, func(args ...string) string) {
	dir := t.TempDir()
	ns := env.NewNamespace(t, optIn)
	writeFile(t, filepath.Join(dir, "app.yaml"), kubectlManifests)
	return ns, func(args ...string) string {
		return tool(t, dir, nil, "kubectl", append([]string{"--namespace", ns}, args...)...)
	}
}
