package cli

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/explain"
	"github.com/configstamp/configstamp/test/framework"
)

// installDeployment is a Deployment as the chart makes configstamp's (no pods run: the
// command-line tools only read its args).
func installDeployment(ns string, podLabels map[string]string, args ...string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "configstamp"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: podLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: podLabels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "configstamp", Image: "registry.example/configstamp:1", Args: args}}}}},
	}
}

// TestNamespacedInstall: the tools judge by a namespaced install's settings (its
// namespace list, a cap of 2 sources, Secrets off), given as flags, read from the
// Deployment --install names, or found through the registration; a tenant's
// look-alike Deployment (same labels and container, other settings) is never read. In
// the watched namespace (not opted in by label): app consumes three ConfigMaps, past
// the cap; mixed two and a Secret, which does not count.
func TestNamespacedInstall(t *testing.T) {
	own, team, tenant := env.NewNamespace(t, false), env.NewNamespace(t, false), env.NewNamespace(t, false)
	pods := map[string]string{"app.kubernetes.io/name": "configstamp", "app.kubernetes.io/instance": "configstamp"}
	coverage := own + "/configstamp-coverage"
	app := deployment(team, "app", envFrom("a"), envFrom("b"), envFrom("c"))
	mixed := deployment(team, "mixed", envFrom("a"), envFrom("b"))
	mixed.Spec.Template.Spec.Containers[0].EnvFrom = append(mixed.Spec.Template.Spec.Containers[0].EnvFrom,
		corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}})
	for _, o := range []client.Object{
		installDeployment(own, pods, "--watch-namespaces="+team, "--coverage-configmap="+coverage, "--max-sources=2", "--secrets=false", "--hash-key="+own+"/configstamp-hash-key"),
		installDeployment(tenant, pods, "--max-sources=10", "--secrets=true", "--hash-key="+tenant+"/key"),
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: own, Name: "configstamp"}, Spec: corev1.ServiceSpec{Selector: pods,
			Ports: []corev1.ServicePort{{Name: "webhook", Port: 443, TargetPort: intstr.FromInt32(9443)}}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: own, Name: "configstamp-coverage"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: own, Name: "configstamp-hash-key"}, Data: map[string][]byte{"key": framework.HashKey}},
		configMap(team, "a", map[string]string{"k": "1"}), configMap(team, "b", map[string]string{"k": "1"}), configMap(team, "c", map[string]string{"k": "1"}),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "s"}, Data: map[string][]byte{"k": []byte("1")}},
		app, mixed,
	} {
		if err := k8s.Create(bg, o); err != nil {
			t.Fatal(err)
		}
	}
	// check runs explain and impact with args, and counts their warnings.
	check := func(t *testing.T, wantWarnings int, args ...string) {
		t.Helper()
		r := run(t, "", append([]string{"explain", "-n", team, "deployment/app", "--hash-key", "", "-o", "json"}, args...)...)
		var rep explain.Report
		if err := json.Unmarshal([]byte(r.stdout), &rep); r.code != 0 || err != nil {
			t.Fatalf("explain: exit %d %v\n%s", r.code, err, r.stderr)
		}
		// Decided by the entry checks, before any read of a source or a dry-run.
		if rep.Verdict != explain.VerdictTooManySources || !strings.Contains(rep.Reason, "cap of 2") || strings.Contains(r.stderr, "dry-run") {
			t.Errorf("explain app: %s %q\nstderr: %s", rep.Verdict, rep.Reason, r.stderr)
		}
		warnings := strings.Count(r.stderr, "warning:")
		r = run(t, "", append([]string{"impact", "-n", team, "configmap/a", "-o", "json"}, args...)...)
		var imp explain.ImpactReport
		if err := json.Unmarshal([]byte(r.stdout), &imp); r.code != 0 || err != nil {
			t.Fatalf("impact: exit %d %v\n%s", r.code, err, r.stderr)
		}
		if got := reasons(imp); !strings.HasPrefix(got["deployment/app"], "consumes 3 sources, more than configstamp's cap of 2") ||
			got["deployment/mixed"] != "rolls: a change of a key it consumes rolls it" {
			t.Errorf("impact configmap/a: %v", got)
		}
		r = run(t, "", append([]string{"impact", "-n", team, "secret/s", "-o", "json"}, args...)...)
		if err := json.Unmarshal([]byte(r.stdout), &imp); r.code != 0 || err != nil {
			t.Fatalf("impact: exit %d %v\n%s", r.code, err, r.stderr)
		}
		if got := reasons(imp); !strings.HasPrefix(got["deployment/mixed"], "Secrets are not hashed") {
			t.Errorf("impact secret/s: %v", got)
		}
		if warnings != wantWarnings {
			t.Errorf("explain: %d warnings, want %d:\n%s", warnings, wantWarnings, r.stderr)
		}
	}
	// Without settings: the defaults, and one warning that they are unverified. The
	// registration is named: without it, dev mode's (left by other tests) is found, with a
	// note instead.
	noReg := []string{"--registration-name", "configstamp"}
	r := run(t, "", "explain", "-n", team, "deployment/app", "--hash-key", "", noReg[0], noReg[1])
	if r.code != 0 || !strings.Contains(r.stdout, explain.VerdictNotInScope) || strings.Count(r.stderr, "warning:") != 1 ||
		!strings.Contains(r.stderr, "warning: the server's settings are unverified (no registration configstamp") {
		t.Errorf("no install found: exit %d\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	t.Run("flags", func(t *testing.T) {
		check(t, 1, append(noReg, "--watch-namespaces", team, "--coverage-configmap", coverage, "--max-sources", "2", "--secrets=false")...)
	})
	t.Run("install", func(t *testing.T) { check(t, 0, "--install", own+"/configstamp") })
	t.Run("registration", func(t *testing.T) {
		reg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "configstamp"},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{
				Name: "deployments.configstamp.io", AdmissionReviewVersions: []string{"v1"},
				SideEffects:   ptr.To(admissionregistrationv1.SideEffectClassNone),
				FailurePolicy: ptr.To(admissionregistrationv1.Ignore),
				ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
					Namespace: own, Name: "configstamp", Path: ptr.To("/mutate-apps-v1-deployment")}},
				// Sent nothing: only its Service is read.
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"configstamp.io/cli-test": "none"}},
			}}}
		if err := k8s.Create(bg, reg); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(bg, reg) })
		check(t, 0)
		// A server flag given wins over the install's; the install's hash key (its
		// --hash-key) computes the digests here, without a dry-run.
		r := runCmd(t, exec.Command(env.Binary, "explain", "-n", team, "deployment/app", "--max-sources", "3", "-o", "json", "--kubeconfig", env.Cluster.Kubeconfig))
		var rep explain.Report
		if err := json.Unmarshal([]byte(r.stdout), &rep); r.code != 0 || err != nil || rep.Verdict == explain.VerdictTooManySources ||
			!rep.SecretsCompared || rep.Current.Hash == "" || strings.Contains(r.stderr, "dry-run") {
			t.Errorf("--max-sources 3: exit %d %v: %s %q current %q\nstderr: %s", r.code, err, rep.Verdict, rep.Reason, rep.Current.Hash, r.stderr)
		}
	})
}

// reasons maps each workload of an impact report to its reason ("rolls: " when it rolls).
func reasons(r explain.ImpactReport) map[string]string {
	out := map[string]string{}
	for _, w := range r.Workloads {
		out[w.Kind+"/"+w.Name] = map[bool]string{true: "rolls: "}[w.Roll] + w.Reason
	}
	return out
}

// TestDryRunTimeout: without the hash key, explain asks the webhooks through a
// server-side dry-run; a webhook that hangs (registered for this namespace alone, the
// API server waiting up to 30 s) ends it after --dry-run-timeout, with a message that
// says so, and the report still comes.
func TestDryRunTimeout(t *testing.T) {
	ns := env.NewNamespace(t, true)
	for _, o := range []client.Object{configMap(ns, "app", map[string]string{"a": "1"}), deployment(ns, "slow", envFrom("app"))} {
		if err := k8s.Create(bg, o); err != nil {
			t.Fatal(err)
		}
	}
	hang := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(hang); srv.Close() })
	reg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "cli-hang-" + ns},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "hang.cli-test.configstamp.io", AdmissionReviewVersions: []string{"v1"},
			SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), FailurePolicy: ptr.To(admissionregistrationv1.Ignore),
			TimeoutSeconds: ptr.To[int32](30),
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(srv.URL + "/hang"),
				CABundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}}}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
		}}}
	if err := k8s.Create(bg, reg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(bg, reg) })
	want := "got no answer within 2s (--dry-run-timeout)"
	// Until the API server calls the registration it was just given.
	framework.Eventually(t, 60*time.Second, "explain's dry-run timed out", func() error {
		r := run(t, "", "explain", "-n", ns, "deployment/slow", "--hash-key", "", "--dry-run-timeout", "2s")
		if r.code != 0 || !strings.Contains(r.stdout, "Verdict:") || !strings.Contains(r.stderr, want) {
			return fmt.Errorf("exit %d, stderr %q", r.code, r.stderr)
		}
		return nil
	})
}
