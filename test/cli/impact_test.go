package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/configstamp/configstamp/internal/explain"
	"github.com/configstamp/configstamp/internal/hashkey"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

var lookPath = exec.LookPath

// TestImpact lists the workloads a change of configmap/app rolls, and of its keys a
// (consumed by all) and b (consumed by those that see all keys).
func TestImpact(t *testing.T) {
	f := fixtures(t)
	m := map[string]string{f.in: "NS"}
	for _, tc := range []struct {
		name  string
		args  []string
		rolls string
	}{
		{name: "any", args: []string{"configmap/app"}, rolls: "daemonset/agent deployment/adopted deployment/current deployment/held statefulset/store"},
		{name: "key-a", args: []string{"cm/app", "--key", "a"}, rolls: "daemonset/agent deployment/adopted deployment/current deployment/held statefulset/store"},
		{name: "key-b", args: []string{"configmap/app", "--key", "b"}, rolls: "daemonset/agent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"impact", "-n", f.in}, tc.args...)
			golden(t, "impact-"+tc.name+".txt", mask(ok(t, args...), m))
			out := ok(t, append(args, "-o", "json")...)
			golden(t, "impact-"+tc.name+".json", mask(out, m))
			var r explain.ImpactReport
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatal(err)
			}
			var rolls, all []string
			for _, w := range r.Workloads {
				all = append(all, w.Kind+"/"+w.Name)
				if w.Roll {
					rolls = append(rolls, w.Kind+"/"+w.Name)
				}
			}
			if strings.Join(rolls, " ") != tc.rolls {
				t.Errorf("rolls %v, want %s", rolls, tc.rolls)
			}
			// Every consumer is listed, the skipped one too (it does not roll).
			if !strings.Contains(strings.Join(all, " "), "deployment/skipped") {
				t.Errorf("workloads %v lack deployment/skipped", all)
			}
		})
	}
}

// TestHash computes stamps offline from manifests and compares them with what the
// webhook stamps for the same objects: ConfigMaps only, and with a Secret and the
// cluster's hash key.
func TestHash(t *testing.T) {
	f := fixtures(t) // the hash key Secret exists
	// The fixture's namespaces are left alone: their state must stay as it is.
	env.Start(t, framework.Options{Args: append(serverArgs, "--exclude-namespaces", "kube-system,"+f.in+","+f.out)})
	ns := env.NewNamespace(t, true)
	manifests := fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {name: web, namespace: %[1]s}
data: {routes.yaml: "a: 1", unused: x}
binaryData: {logo.png: aGVsbG8=}
---
apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: %[1]s}
stringData: {token: s3cret}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: %[1]s, annotations: {configstamp.io/extra-sources: "configmap/sidecar"}}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      volumes: [{name: w, configMap: {name: web, items: [{key: routes.yaml, path: r}, {key: logo.png, path: l}]}}]
      containers:
      - name: c
        image: registry.example/web:1
        env:
        - {name: T, valueFrom: {secretKeyRef: {name: creds, key: token}}}
        - {name: O, valueFrom: {configMapKeyRef: {name: opt, key: k, optional: true}}}
`, ns)
	dir := t.TempDir()
	file := filepath.Join(dir, "all.yaml")
	if err := os.WriteFile(file, []byte(manifests), 0o600); err != nil {
		t.Fatal(err)
	}
	apply := env.Command(dir, nil, "kubectl", "apply", "-f", file)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	d := env.Deployment(t, ns, "web")
	want := d.Spec.Template.Annotations
	if want[stamp.HashAnnotation] == "" {
		t.Fatal("the webhook did not stamp the Deployment")
	}
	var key corev1.Secret
	if err := k8s.Get(bg, client.ObjectKey{Namespace: keyNamespace, Name: keyName}, &key); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, key.Data[hashkey.DataKey], 0o600); err != nil {
		t.Fatal(err)
	}
	var got []explain.OfflineStamp
	if err := json.Unmarshal([]byte(ok(t, "hash", "-f", file, "--key-file", keyFile, "--secrets", "-o", "json")), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Hash != want[stamp.HashAnnotation] || got[0].Sources != want[stamp.SourcesAnnotation] {
		t.Errorf("hash -f: %+v\nwebhook: %s %s", got, want[stamp.HashAnnotation], want[stamp.SourcesAnnotation])
	}
	if len(got) == 1 && strings.Join(got[0].NotInFiles, ",") != "configmap/opt,configmap/sidecar" {
		t.Errorf("notInFiles %v", got[0].NotInFiles)
	}
	// From stdin, with the table output.
	cmd := exec.Command(env.Binary, "hash", "-f", "-", "--key-file", keyFile, "--secrets")
	cmd.Stdin = strings.NewReader(manifests)
	r := runCmd(t, cmd)
	if r.code != 0 || !strings.Contains(r.stdout, "configstamp.io/config-hash: "+want[stamp.HashAnnotation]) {
		t.Errorf("hash -f -: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	golden(t, "hash.txt", mask(r.stdout, map[string]string{ns: "NS", want[stamp.HashAnnotation]: "<stamp>"}))

	// Without --secrets, Secrets do not count, as with a server without --secrets.
	var noSecrets []explain.OfflineStamp
	if err := json.Unmarshal([]byte(ok(t, "hash", "-f", file, "--key-file", keyFile, "-o", "json")), &noSecrets); err != nil {
		t.Fatal(err)
	}
	if len(noSecrets) != 1 || strings.Contains(noSecrets[0].Sources, "secret/") || noSecrets[0].Hash == want[stamp.HashAnnotation] {
		t.Errorf("hash without --secrets: %+v", noSecrets)
	}
	// Without the key, no digest: a clear error pointing at explain.
	if r := run(t, "", "hash", "-f", file); r.code == 0 || !strings.Contains(r.stderr, "--key-file is required") {
		t.Errorf("hash without key: exit %d, stderr %q", r.code, r.stderr)
	}
	var yamlOut []explain.OfflineStamp
	if err := yaml.Unmarshal([]byte(ok(t, "hash", "-f", file, "-o", "yaml", "--key-file", keyFile, "--secrets")), &yamlOut); err != nil || len(yamlOut) != 1 || yamlOut[0].Hash != got[0].Hash {
		t.Errorf("-o yaml: %v %+v", err, yamlOut)
	}
}

// TestErrors checks the exit code and message of each failure a user meets.
func TestErrors(t *testing.T) {
	f := fixtures(t)
	noAccess := identity(t)
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	unreachable := filepath.Join(t.TempDir(), "unreachable.kubeconfig")
	if err := os.WriteFile(unreachable, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:%d", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: default}}]
current-context: c
`, port)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing object", []string{"explain", "-n", f.in, "deployment/nope"}, "error: deployment/nope not found in namespace " + f.in},
		{"unsupported kind", []string{"explain", "-n", f.in, "pod/web"}, `error: unsupported kind "pod": want deployment, statefulset, daemonset, cronjob, job or rollout`},
		{"unsupported source kind", []string{"impact", "-n", f.in, "deployment/current"}, `error: unsupported kind "deployment": want configmap, secret or secretproviderclass`},
		{"no access", []string{"explain", "-n", f.in, "deployment/current", "--kubeconfig", noAccess}, "error: no access to deployment/current in namespace " + f.in},
		{"no access impact", []string{"impact", "-n", f.in, "configmap/app", "--kubeconfig", noAccess}, "error: no access to"},
		{"unreachable", []string{"explain", "deployment/current", "--kubeconfig", unreachable}, "error: cannot reach the cluster"},
		{"no manifests", []string{"hash"}, "error: no manifests"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, "", tc.args...)
			if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want non-zero and %q", r.code, r.stderr, tc.want)
			}
		})
	}
}

// identity makes a kubeconfig of a user allowed rules (framework.Env.Identity).
func identity(t *testing.T, rules ...rbacv1.PolicyRule) string { return env.Identity(t, rules...) }

// TestNoSecretAccess explains a workload that consumes a Secret as a user who may read
// everything but Secrets and the key, and may not create Deployments: no digest can be
// computed, neither here nor by the webhook's dry-run, and it says why; the deleted
// Secret is not seen (no access), so the verdict is unknown.
func TestNoSecretAccess(t *testing.T) {
	f := fixtures(t)
	kubeconfig := identity(t,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces", "configmaps", "events"}, Verbs: []string{"get", "list"}},
		rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list"}})
	var r explain.Report
	framework.Eventually(t, 30*time.Second, "RBAC in effect", func() error {
		res := run(t, "", "explain", "-n", f.in, "deployment/held", "--hash-key", keyRef, "-o", "json", "--kubeconfig", kubeconfig)
		if res.code != 0 {
			return fmt.Errorf("exit %d: %s", res.code, res.stderr)
		}
		if !strings.Contains(res.stderr, "warning: no access to secret/db") || !strings.Contains(res.stderr, "needs the right to create deployments") {
			return fmt.Errorf("stderr %q", res.stderr)
		}
		return json.Unmarshal([]byte(res.stdout), &r)
	})
	if r.Verdict != explain.VerdictUnknown || r.SecretsCompared || len(r.Sources) != 2 || r.Sources[0].Status != explain.StatusUnknown || r.Sources[1].Status != explain.StatusUnknown {
		t.Errorf("got %s secretsCompared=%v sources %+v", r.Verdict, r.SecretsCompared, r.Sources)
	}
}

// TestImpactCronJobJob: a Job created from a CronJob takes the CronJob's extra sources
// (the webhook stamped it with them), so impact lists it under them beside its CronJob,
// as stamped at its creation only, and rolls nothing.
func TestImpactCronJobJob(t *testing.T) {
	ns := env.NewNamespace(t, true)
	tmpl := template("report")
	cj := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "report", Annotations: map[string]string{stamp.ExtraSourcesAnnotation: "configmap/extra"}},
		Spec: batchv1.CronJobSpec{Schedule: "0 0 31 2 *", Suspend: ptr.To(true), JobTemplate: batchv1.JobTemplateSpec{
			Spec: batchv1.JobSpec{Template: tmpl}}},
	}
	cj.Spec.JobTemplate.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	if err := k8s.Create(bg, cj); err != nil {
		t.Fatal(err)
	}
	// As `kubectl create job --from=cronjob/report` makes them: the CronJob their controller.
	for _, name := range []string{"report-manual", "report-manual-2"} {
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cj, batchv1.SchemeGroupVersion.WithKind("CronJob"))}},
			Spec: *cj.Spec.JobTemplate.Spec.DeepCopy(),
		}
		if err := k8s.Create(bg, job); err != nil {
			t.Fatal(err)
		}
	}
	var r explain.ImpactReport
	if err := json.Unmarshal([]byte(ok(t, "impact", "-n", ns, "configmap/extra", "-o", "json")), &r); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range r.Workloads {
		got = append(got, fmt.Sprintf("%s/%s roll=%v", w.Kind, w.Name, w.Roll))
		if w.Kind == "job" && !strings.Contains(w.Reason, "stamped at its creation only") {
			t.Errorf("job reason %q", w.Reason)
		}
	}
	if want := "cronjob/report roll=true job/report-manual roll=false job/report-manual-2 roll=false"; strings.Join(got, " ") != want {
		t.Errorf("workloads %v, want %s", got, want)
	}

	// The CronJob deleted (no garbage collector here: its Jobs stay): its Jobs are judged
	// by their own annotations, with one warning for the CronJob (it is read once), not
	// one per Job.
	if err := k8s.Delete(bg, cj); err != nil {
		t.Fatal(err)
	}
	res := run(t, "", "impact", "-n", ns, "configmap/extra", "-o", "json")
	if n := strings.Count(res.stderr, "cannot read its cronjob report"); res.code != 0 || n != 1 {
		t.Errorf("exit %d, %d warnings for the deleted CronJob, want 1:\n%s", res.code, n, res.stderr)
	}
}
