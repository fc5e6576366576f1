package integration

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/explain"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

// TestExplainWithoutTheKey: a user who may read their namespace and create Deployments
// there, but not configstamp's key, gets explain's digests from the webhook (a
// server-side dry-run create of a copy): up to date while nothing changed; after a
// change, would-roll with the current hash docs/hash.md gives; nothing stored. A user
// who may not create Deployments is told why nothing could be compared.
func TestExplainWithoutTheKey(t *testing.T) {
	// A long debounce: the watcher does not re-stamp while explain looks.
	env.Start(t, framework.Options{Args: []string{"--debounce", "10m", "--debounce-max", "10m"}})
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "cfg", map[string]string{"a": "1"}))
	d := createDeployment(t, ns, "web", podWithVolumes("cfg"))
	stamped := hashOf(getDeployment(t, ns, d.Name))
	if stamped == "" {
		t.Fatal("not stamped")
	}
	read := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces", "configmaps", "events"}, Verbs: []string{"get", "list"}}
	readApps := rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments", "replicasets"}, Verbs: []string{"get", "list"}}
	deployer := env.Identity(t, read, readApps, rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"create"}})
	reader := env.Identity(t, read, readApps)

	explainAs := func(kubeconfig string) (explain.Report, string) {
		t.Helper()
		var r explain.Report
		var stderr string
		framework.Eventually(t, 30e9, "RBAC in effect", func() error {
			cmd := exec.Command(env.Binary, "explain", "-n", ns, "deployment/web", "-o", "json", "--kubeconfig", kubeconfig,
				"--hash-key", framework.HashKeyRef)
			var errb strings.Builder
			cmd.Stderr = &errb
			out, err := cmd.Output()
			stderr = errb.String()
			if err != nil {
				return err
			}
			if strings.Contains(stderr, "forbidden") && !strings.Contains(stderr, "dry-run") {
				return json.Unmarshal(out, &r) // RBAC not in effect yet: try again
			}
			return json.Unmarshal(out, &r)
		})
		return r, stderr
	}

	r, stderr := explainAs(deployer)
	if r.Verdict != explain.VerdictUpToDate || !r.SecretsCompared || r.Current.Hash != stamped {
		t.Errorf("unchanged: %s %q compared=%v current %s, want up to date with %s; stderr %s", r.Verdict, r.Reason, r.SecretsCompared, r.Current.Hash, stamped, stderr)
	}

	setData(t, ns, "cfg", "a", "2")
	want := docHash(t, ns, docSource{name: "cfg"})
	r, stderr = explainAs(deployer)
	if r.Verdict != explain.VerdictWouldRoll || r.Current.Hash != want || len(r.Sources) != 1 || r.Sources[0].Status != explain.StatusChanged {
		t.Errorf("changed: %s %q current %s sources %+v, want would-roll with %s; stderr %s", r.Verdict, r.Reason, r.Current.Hash, r.Sources, want, stderr)
	}
	var list appsv1.DeploymentList
	if err := k8s.List(bg, &list, client.InNamespace(ns)); err != nil || len(list.Items) != 1 {
		t.Errorf("Deployments in %s: %d, want only web (a dry-run stores nothing): %v", ns, len(list.Items), err)
	}
	if got := getDeployment(t, ns, "web").Spec.Template.Annotations[stamp.HashAnnotation]; got != stamped {
		t.Errorf("explain changed the stamp: %s, was %s", got, stamped)
	}

	r, stderr = explainAs(reader)
	if r.SecretsCompared || !strings.Contains(stderr, "needs the right to create deployments") {
		t.Errorf("without create: compared=%v stderr %q, want a warning naming the right", r.SecretsCompared, stderr)
	}
}
