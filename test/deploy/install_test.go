package deploy

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/certs"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/webhook"
)

// certManagerVersion is the cert-manager release whose CRDs validate the chart's objects;
// they ship as YAML in its Go module.
const certManagerVersion = "v1.21.2"

func certManagerCRDs(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", "github.com/cert-manager/cert-manager@"+certManagerVersion).Output()
	if err != nil {
		t.Fatalf("download cert-manager module: %v", err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("cert-manager module dir: %v %s", err, out)
	}
	return filepath.Join(mod.Dir, "deploy", "crds")
}

// TestChartInstallsAndWorksUnderItsRBAC installs the chart with the real helm (the
// cert-manager objects validated by cert-manager's real CRDs), then runs configstamp out
// of cluster with a token of the chart's ServiceAccount: stamping and the watcher work
// under that identity, and it can do nothing it should not.
func TestChartInstallsAndWorksUnderItsRBAC(t *testing.T) {
	crds := certManagerCRDs(t)
	for _, f := range []string{"cert-manager.io_certificates.yaml", "cert-manager.io_issuers.yaml"} {
		tool(t, "kubectl", "apply", "--server-side", "-f", filepath.Join(crds, f))
	}
	tool(t, "kubectl", "wait", "--for=condition=Established", "--timeout=60s", "crd/certificates.cert-manager.io", "crd/issuers.cert-manager.io")
	tool(t, "helm", "install", "configstamp", chart, "--namespace", releaseNS, "--create-namespace", "--wait=false")
	for _, obj := range []string{"certificate/configstamp-ca", "certificate/configstamp-webhook", "issuer/configstamp-ca", "issuer/configstamp-selfsigned"} {
		tool(t, "kubectl", "--namespace", releaseNS, "get", obj)
	}
	// An invalid Certificate is refused by the same CRDs: the check above has teeth.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata: {name: bad, namespace: "+releaseNS+"}\nspec: {secretName: x, issuerRef: {name: y}, duration: forever}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := toolErr("kubectl", "apply", "-f", bad); err == nil {
		t.Fatalf("an invalid Certificate was accepted: %s", out)
	}

	// Point the chart's registration at a process out of cluster (no image can run here).
	certDir := t.TempDir()
	ca, err := certs.WriteSelfSigned(certDir, "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("https://127.0.0.1:%d%s", port, webhook.Path)
	patch := fmt.Sprintf(`[{"op":"replace","path":"/webhooks/0/clientConfig","value":{"url":%q,"caBundle":%q}}]`, url, base64.StdEncoding.EncodeToString(ca))
	tool(t, "kubectl", "patch", "mutatingwebhookconfiguration", webhook.ConfigurationName, "--type=json", "-p", patch)

	token := strings.TrimSpace(tool(t, "kubectl", "--namespace", releaseNS, "create", "token", "configstamp", "--duration=1h"))
	kubeconfig := filepath.Join(t.TempDir(), "sa.kubeconfig")
	caFile := filepath.Join(env.Cluster.Dir, "pki", "ca.crt")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: sa, user: {token: %q}}]
contexts: [{name: c, context: {cluster: c, user: sa}}]
current-context: c
`, env.Cluster.URL, caFile, token)), 0o600); err != nil {
		t.Fatal(err)
	}
	cs := env.Start(t, framework.Options{
		Kubeconfig: kubeconfig, SkipRegistration: true, WebhookPort: port,
		Args: []string{"--webhook-cert-dir", certDir, "--leader-elect", "--leader-election-namespace", releaseNS},
	})

	// Stamping and the watcher, under the ServiceAccount.
	ctx := context.Background()
	ns := env.NewNamespace(t, true)
	c := env.Client
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cfg"}, Data: map[string]string{"k": "1"}}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "app"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1",
					EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}}}}},
	}
	if err := c.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	first := dep.Spec.Template.Annotations[stamp.HashAnnotation]
	if first == "" {
		t.Fatal("not stamped under the chart's ServiceAccount")
	}
	if err := c.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte(`{"data":{"k":"2"}}`))); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "watcher rolls under the ServiceAccount", func() error {
		var d appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKeyFromObject(dep), &d); err != nil {
			return err
		}
		if h := d.Spec.Template.Annotations[stamp.HashAnnotation]; h == first || d.Generation != dep.Generation+1 {
			return fmt.Errorf("generation %d, hash %s", d.Generation, h)
		}
		return nil
	})
	framework.Eventually(t, 10*time.Second, "ConfigChanged event under the ServiceAccount", func() error {
		var evs corev1.EventList
		if err := c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == "app" && e.Reason == "ConfigChanged" {
				return nil
			}
		}
		return fmt.Errorf("no ConfigChanged event among %d", len(evs.Items))
	})
	if out := cs.Output(); strings.Contains(out, "forbidden") {
		t.Fatalf("configstamp hit a permission it lacks:\n%s", out)
	}

	// And nothing more.
	sa := "system:serviceaccount:" + releaseNS + ":configstamp"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "configmaps", "-n", ns}, "yes"},
		{[]string{"watch", "configmaps", "--all-namespaces"}, "yes"},
		{[]string{"patch", "deployments", "-n", ns}, "yes"},
		{[]string{"create", "leases", "-n", releaseNS}, "yes"},
		{[]string{"list", "replicasets", "-n", ns}, "yes"},
		{[]string{"get", "mutatingwebhookconfigurations/configstamp"}, "yes"},
		{[]string{"get", "mutatingwebhookconfigurations/other"}, "no"},
		{[]string{"update", "replicasets", "-n", ns}, "no"},
		{[]string{"get", "secrets", "-n", releaseNS}, "no"},
		{[]string{"get", "secrets", "-n", ns}, "no"},
		{[]string{"list", "secrets", "--all-namespaces"}, "no"},
		{[]string{"update", "configmaps", "-n", ns}, "no"},
		{[]string{"create", "deployments", "-n", ns}, "no"},
		{[]string{"delete", "deployments", "-n", ns}, "no"},
		{[]string{"update", "namespaces"}, "no"},
		{[]string{"patch", "mutatingwebhookconfigurations"}, "no"},
		{[]string{"create", "leases", "-n", ns}, "no"},
		{[]string{"create", "pods", "-n", ns}, "no"},
	} {
		out, _ := toolErr("kubectl", append([]string{"auth", "can-i", "--as", sa}, tc.args...)...)
		lines := strings.Split(strings.TrimSpace(out), "\n") // warnings come first
		if got := lines[len(lines)-1]; got != tc.want {
			t.Errorf("can-i %s: %q, want %q", strings.Join(tc.args, " "), got, tc.want)
		}
	}
}
