package deploy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/certs"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
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

// applyCertManagerCRDs applies the CRDs of the cert-manager objects the chart renders.
func applyCertManagerCRDs(t *testing.T) {
	t.Helper()
	crds := certManagerCRDs(t)
	for _, f := range []string{"cert-manager.io_certificates.yaml", "cert-manager.io_issuers.yaml"} {
		tool(t, "kubectl", "apply", "--server-side", "-f", filepath.Join(crds, f))
	}
	tool(t, "kubectl", "wait", "--for=condition=Established", "--timeout=60s", "crd/certificates.cert-manager.io", "crd/issuers.cert-manager.io")
}

// installChart applies the cert-manager CRDs the chart's objects need and installs the
// chart with the real helm, afresh: a release left by an earlier test is uninstalled
// first (outOfCluster repoints its registration, which an upgrade could not merge).
func installChart(t *testing.T, args ...string) {
	t.Helper()
	applyCertManagerCRDs(t)
	tool(t, "helm", "uninstall", "configstamp", "--namespace", releaseNS, "--ignore-not-found", "--wait")
	tool(t, "helm", append([]string{"install", "configstamp", chart, "--namespace", releaseNS, "--create-namespace", "--wait=false"}, args...)...)
}

// outOfCluster points every entry of the chart's registration at a webhook server on this
// machine (no image can run here), each at its own path, and returns the port, the
// certificate directory to serve with, and a kubeconfig with a token of the chart's
// ServiceAccount.
func outOfCluster(t *testing.T) (port int, certDir, kubeconfig string) {
	t.Helper()
	certDir = t.TempDir()
	ca, err := certs.WriteSelfSigned(certDir, "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	port, kubeconfig = repoint(t, ca)
	return port, certDir, kubeconfig
}

// repoint points every entry of the chart's registration at a free port on this machine,
// each at its own path, with caBundle (nil: none, for configstamp to fill), and returns the
// port and a kubeconfig with a token of the chart's ServiceAccount.
func repoint(t *testing.T, caBundle []byte) (port int, kubeconfig string) {
	t.Helper()
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port, repointAt(t, caBundle, port)
}

// repointAt is repoint to a given port.
func repointAt(t *testing.T, caBundle []byte, port int) (kubeconfig string) {
	t.Helper()
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "configstamp"}, &mwc); err != nil {
		t.Fatal(err)
	}
	var ops []string
	for i, w := range mwc.Webhooks {
		if w.ClientConfig.Service == nil || w.ClientConfig.Service.Path == nil {
			t.Fatalf("entry %s does not call the Service at a path", w.Name)
		}
		cc := admissionregistrationv1.WebhookClientConfig{URL: ptr.To(fmt.Sprintf("https://127.0.0.1:%d%s", port, *w.ClientConfig.Service.Path)), CABundle: caBundle}
		value, err := json.Marshal(cc)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, fmt.Sprintf(`{"op":"replace","path":"/webhooks/%d/clientConfig","value":%s}`, i, value))
	}
	tool(t, "kubectl", "patch", "mutatingwebhookconfiguration", "configstamp", "--type=json", "-p", "["+strings.Join(ops, ",")+"]")

	return env.ServiceAccountKubeconfig(t, releaseNS, "configstamp")
}

// certManagerMode plays cert-manager for the chart's cert-manager mode (no cert-manager
// runs here): it writes the kubernetes.io/tls Secret the rendered --tls-secret names as
// cert-manager's CA issuer would, tls.crt for the Service's names and for 127.0.0.1
// (where repoint points the registration), tls.key, and ca.crt, the CA that signed it.
// It returns the flags the chart renders for that mode, with a fresh cert dir for
// configstamp to fill, and ca.crt.
func certManagerMode(t *testing.T, flags map[string]string) (args []string, ca []byte) {
	t.Helper()
	if want := releaseNS + "/configstamp-cert-manager-tls"; flags["--tls-secret"] != want {
		t.Fatalf("--tls-secret=%s, want %s (the Certificate's secretName)", flags["--tls-secret"], want)
	}
	ns, name, _ := strings.Cut(flags["--tls-secret"], "/")
	dir := t.TempDir()
	if _, err := certs.WriteSelfSigned(dir, "configstamp."+ns+".svc", "configstamp."+ns+".svc.cluster.local", "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	data := map[string][]byte{}
	for _, f := range []string{certs.CertName, certs.KeyName, certs.CAName} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		data[f] = b
	}
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS, Data: data}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	// helm uninstall leaves it, as it leaves cert-manager's: removed, so the next test
	// can write its own.
	t.Cleanup(func() { _ = env.Client.Delete(ctx, secret) })
	return []string{"--webhook-cert-dir", t.TempDir(), "--tls-secret=" + flags["--tls-secret"], "--ca-switch-delay=" + flags["--ca-switch-delay"]}, data[certs.CAName]
}

// caBundles returns the caBundle of each entry of the chart's registration.
func caBundles() ([][]byte, error) {
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "configstamp"}, &mwc); err != nil {
		return nil, err
	}
	var out [][]byte
	for _, w := range mwc.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	return out, nil
}

// bundlesAre checks that every entry's caBundle holds exactly the CAs of want (any, when
// want is nil, as long as there is one).
func bundlesAre(want []byte) func() error {
	return func() error {
		bundles, err := caBundles()
		if err != nil {
			return err
		}
		for i, b := range bundles {
			if len(b) == 0 || want != nil && !sameCerts(b, want) {
				return fmt.Errorf("entry %d: caBundle of %d bytes, not the one wanted", i, len(b))
			}
		}
		return nil
	}
}

// sameCerts: a and b hold the same certificates (PEM), in the same order.
func sameCerts(a, b []byte) bool {
	ca, errA := certutil.ParseCertsPEM(a)
	cb, errB := certutil.ParseCertsPEM(b)
	return errA == nil && errB == nil && slices.EqualFunc(ca, cb, func(x, y *x509.Certificate) bool { return x.Equal(y) })
}

// wipeAndRepair removes every entry's caBundle, as kubectl replace or helm upgrade --force
// of the registration would, and waits for configstamp to put it back, through its watch of
// the registration by name: within seconds, not at the next periodic pass.
func wipeAndRepair(t *testing.T, want []byte) {
	t.Helper()
	bundles, err := caBundles()
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for i := range bundles {
		ops = append(ops, fmt.Sprintf(`{"op":"remove","path":"/webhooks/%d/clientConfig/caBundle"}`, i))
	}
	tool(t, "kubectl", "patch", "mutatingwebhookconfiguration", "configstamp", "--type=json", "-p", "["+strings.Join(ops, ",")+"]")
	framework.Eventually(t, 10*time.Second, "wiped caBundle repaired under the chart's ServiceAccount", bundlesAre(want))
}

// canI checks what the chart's ServiceAccount may do: each case is kubectl auth can-i
// arguments and the answer wanted.
func canI(t *testing.T, cases map[string]string) {
	t.Helper()
	canIAs(t, "configstamp", cases)
}

// canIAs is canI for the chart's ServiceAccount name.
func canIAs(t *testing.T, name string, cases map[string]string) {
	t.Helper()
	sa := "system:serviceaccount:" + releaseNS + ":" + name
	for _, args := range slices.Sorted(maps.Keys(cases)) {
		out, _ := toolErr("kubectl", append([]string{"auth", "can-i", "--as", sa}, strings.Fields(args)...)...)
		lines := strings.Split(strings.TrimSpace(out), "\n") // warnings come first
		if got := lines[len(lines)-1]; got != cases[args] {
			t.Errorf("can-i %s: %q, want %q", args, got, cases[args])
		}
	}
}

// TestChartInstallsAndWorksUnderItsRBAC installs the chart with the real helm (the
// cert-manager objects validated by cert-manager's real CRDs), then runs configstamp out
// of cluster as the chart runs it, the webhook with a token of its ServiceAccount
// configstamp-webhook and the watcher with one of configstamp, in cert-manager mode with
// the flags the chart renders: it serves the certificate of the Secret cert-manager would
// write, puts that Secret's CA into the registration's caBundle (empty before: the chart
// sets none and asks no CA injector), repairs a wiped one within seconds through its
// watches by name; stamping and the watcher work under that identity, and it can do
// nothing it should not.
func TestChartInstallsAndWorksUnderItsRBAC(t *testing.T) {
	installChart(t)
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

	objs := render(t)
	flags, watcherFlags := processFlags(t, objs), flagsOf(t, objs, "Deployment/configstamp-watcher")
	certArgs, ca := certManagerMode(t, flags)
	port, kubeconfig := repoint(t, nil)
	// The two roles as the chart runs them, each as its own ServiceAccount: the webhook as
	// configstamp-webhook, honouring the watcher's markers (--watcher-user); the watcher as
	// configstamp. Start returns once the API server calls the webhook, trusting only the
	// caBundle.
	cs := env.Start(t, framework.Options{
		Kubeconfig: env.ServiceAccountKubeconfig(t, releaseNS, "configstamp-webhook"), SkipRegistration: true, WebhookPort: port,
		Args: append(certArgs, "--role="+flags["--role"], "--hash-key="+flags["--hash-key"], "--watcher-user="+flags["--watcher-user"]),
	})
	watcher := env.Start(t, framework.Options{Kubeconfig: kubeconfig, NoWebhook: true,
		Args: []string{"--role=" + watcherFlags["--role"], "--leader-elect=" + watcherFlags["--leader-elect"], "--leader-election-namespace", releaseNS, "--hash-key=" + watcherFlags["--hash-key"]}})
	if err := bundlesAre(ca)(); err != nil {
		t.Errorf("caBundle not the Secret's ca.crt: %v", err)
	}
	wipeAndRepair(t, ca)

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
	// The check NOTES.txt gives, run as a user would, in the opted-in namespace: the
	// dry run prints the stamp; nothing is created.
	printed := runShell(t, notesCheck(t, notes(t), ns))
	var stamped map[string]string
	if err := json.Unmarshal([]byte(printed[strings.LastIndex(printed, "\n{")+1:]), &stamped); err != nil ||
		len(stamped[stamp.HashAnnotation]) != 64 || !strings.HasPrefix(stamped[stamp.SourcesAnnotation], "configmap/configstamp-check=") {
		t.Errorf("the check NOTES.txt gives printed %q (%v), want the stamp", printed, err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "configstamp-check"}, &appsv1.Deployment{}); err == nil {
		t.Error("the check NOTES.txt gives created a Deployment")
	}

	for _, p := range []*framework.Configstamp{cs, watcher} {
		if out := p.Output(); strings.Contains(out, "forbidden") {
			t.Fatalf("configstamp hit a permission it lacks:\n%s", out)
		}
	}

	// And nothing more.
	canI(t, map[string]string{
		"get configmaps -n " + ns:                                     "yes",
		"watch configmaps --all-namespaces":                           "yes",
		"patch deployments -n " + ns:                                  "yes",
		"patch statefulsets -n " + ns:                                 "yes",
		"patch daemonsets -n " + ns:                                   "yes",
		"create leases -n " + releaseNS:                               "yes",
		"update leases/configstamp-watcher -n " + releaseNS:           "yes",
		"update leases/other -n " + releaseNS:                         "no",
		"list replicasets -n " + ns:                                   "yes",
		"list controllerrevisions -n " + ns:                           "yes",
		"get mutatingwebhookconfigurations/configstamp":               "yes",
		"get mutatingwebhookconfigurations/other":                     "no",
		"update mutatingwebhookconfigurations/configstamp":            "no",
		"watch mutatingwebhookconfigurations/configstamp":             "no", // the webhook's (configstamp-webhook)
		"update mutatingwebhookconfigurations/other":                  "no",
		"get secrets/configstamp-cert-manager-tls -n " + releaseNS:    "no", // the webhook's alone
		"list secrets/configstamp-cert-manager-tls -n " + releaseNS:   "no",
		"watch secrets/configstamp-cert-manager-tls -n " + releaseNS:  "no",
		"update secrets/configstamp-cert-manager-tls -n " + releaseNS: "no",
		"delete secrets/configstamp-cert-manager-tls -n " + releaseNS: "no",
		"get secrets/configstamp-ca -n " + releaseNS:                  "no",
		"get secrets/configstamp-cert-manager-tls -n " + ns:           "no",
		"update replicasets -n " + ns:                                 "no",
		"get controllerrevisions -n " + ns:                            "no",
		"get secrets -n " + releaseNS:                                 "no",
		"get secrets -n " + ns:                                        "no",
		"list secrets --all-namespaces":                               "no",
		"create secrets -n " + releaseNS:                              "no",
		"list rollouts.argoproj.io --all-namespaces":                  "no",
		"list customresourcedefinitions.apiextensions.k8s.io":         "no",
		"update configmaps -n " + ns:                                  "no",
		"create deployments -n " + ns:                                 "no",
		"delete deployments -n " + ns:                                 "no",
		"delete statefulsets -n " + ns:                                "no",
		"update namespaces":                                           "no",
		"patch mutatingwebhookconfigurations/configstamp":             "yes",
		"patch mutatingwebhookconfigurations/other":                   "no",
		"create leases -n " + ns:                                      "no",
		"create pods -n " + ns:                                        "no",
		"create tokenreviews.authentication.k8s.io":                   "yes", // metrics.secure, on by default
		"create subjectaccessreviews.authorization.k8s.io":            "yes",
		"list mutatingwebhookconfigurations":                          "no",
	})
}

// TestChartWithSecretsAndRolloutsWorksUnderItsRBAC installs the chart with Secrets and
// Argo Rollouts enabled and runs configstamp with the flags the chart renders, under the
// chart's ServiceAccount: it creates its key Secret, stamps and rolls workloads of every
// kind, opted in by namespace or by their own label, consuming ConfigMaps and Secrets,
// and hits no permission it lacks; the added permissions are exactly the documented ones.
// With metrics.secure too: /metrics answers a scraper bound to the chart's
// configstamp-metrics-reader, and refuses one without a token or without that binding.
func TestChartWithSecretsAndRolloutsWorksUnderItsRBAC(t *testing.T) {
	values := []string{"--set", "secrets.enabled=true", "--set", "argoRollouts.enabled=true", "--set", "metrics.secure=true"}
	// Argo's real Rollout CRD (no Rollouts controller runs here), before configstamp starts.
	if err := env.InstallCRDs(context.Background(), framework.ArgoRolloutsCRD()); err != nil {
		t.Fatal(err)
	}
	installChart(t, values...)
	flags := processFlags(t, render(t, values...))
	certArgs, _ := certManagerMode(t, flags)
	port, kubeconfig := repoint(t, nil)
	metricsPort, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// The two roles, each as its own ServiceAccount (the webhook's serves the metrics
	// scraped below).
	cs := env.Start(t, framework.Options{
		Kubeconfig: env.ServiceAccountKubeconfig(t, releaseNS, "configstamp-webhook"), SkipRegistration: true, WebhookPort: port,
		Args: append(certArgs, "--role="+flags["--role"], "--watcher-user="+flags["--watcher-user"],
			"--secrets="+flags["--secrets"], "--hash-key="+flags["--hash-key"], "--argo-rollouts="+flags["--argo-rollouts"],
			"--metrics-secure="+flags["--metrics-secure"], fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metricsPort)),
	})
	watcher := env.Start(t, framework.Options{Kubeconfig: kubeconfig, NoWebhook: true,
		Args: []string{"--role=watcher", "--leader-elect", "--leader-election-namespace", releaseNS, "--debounce", "500ms",
			"--secrets=" + flags["--secrets"], "--hash-key=" + flags["--hash-key"], "--argo-rollouts=" + flags["--argo-rollouts"]}})
	ctx := context.Background()
	c := env.Client

	// Authenticated metrics under the chart's RBAC: configstamp reviews each scraper's
	// token; the chart's reader role is what lets one in.
	tool(t, "kubectl", "--namespace", releaseNS, "create", "serviceaccount", "scraper")
	tool(t, "kubectl", "create", "clusterrolebinding", "configstamp-metrics-scraper", "--clusterrole", "configstamp-metrics-reader", "--serviceaccount", releaseNS+":scraper")
	t.Cleanup(func() { _, _ = toolErr("kubectl", "delete", "clusterrolebinding", "configstamp-metrics-scraper") })
	scrape := func(sa string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/metrics", metricsPort), nil)
		if err != nil {
			t.Fatal(err)
		}
		if sa != "" {
			req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(tool(t, "kubectl", "--namespace", releaseNS, "create", "token", sa)))
		}
		// The certificate is one configstamp generates itself, as the ServiceMonitor assumes.
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	framework.Eventually(t, 30*time.Second, "metrics served to a scraper bound to configstamp-metrics-reader", func() error {
		if code, body := scrape("scraper"); code != http.StatusOK || !strings.Contains(body, "configstamp_") {
			return fmt.Errorf("status %d: %.200s", code, body)
		}
		return nil
	})
	for sa, want := range map[string]int{"": http.StatusUnauthorized, "configstamp": http.StatusForbidden} {
		if code, body := scrape(sa); code != want {
			t.Errorf("metrics scraped with the token of %q: status %d, want %d: %.200s", sa, code, want, body)
		}
	}

	// The hash key, in the Secret the chart created empty, filled by configstamp under
	// the ServiceAccount (which may not create Secrets).
	var key corev1.Secret
	framework.Eventually(t, 30*time.Second, "configstamp fills its key Secret", func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: releaseNS, Name: "configstamp-hash-key"}, &key); err != nil {
			return err
		}
		if n := len(key.Data["key"]); n != 32 {
			return fmt.Errorf("key of %d bytes, want 32", n)
		}
		return nil
	})

	create := func(obj client.Object) {
		t.Helper()
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
		}
	}
	podSpec := func(env ...corev1.EnvVar) corev1.PodSpec {
		return corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1", Env: env}}}
	}
	fromConfigMap := corev1.EnvVar{Name: "K", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "k"}}}
	fromSecret := corev1.EnvVar{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password"}}}
	selector := func(app string) (*metav1.LabelSelector, map[string]string) {
		l := map[string]string{"app": app}
		return &metav1.LabelSelector{MatchLabels: l}, l
	}
	// hashOf reads a workload's stamp and sources (any kind, as unstructured).
	hashOf := func(gvk schema.GroupVersionKind, ns, name string) (hash, sources string, generation int64) {
		t.Helper()
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
			t.Fatalf("get %s %s/%s: %v", gvk.Kind, ns, name, err)
		}
		ann, _, _ := unstructured.NestedStringMap(u.Object, "spec", "template", "metadata", "annotations")
		return ann[stamp.HashAnnotation], ann[stamp.SourcesAnnotation], u.GetGeneration()
	}
	rollsOnce := func(gvk schema.GroupVersionKind, ns, name string, change func()) {
		t.Helper()
		first, _, gen := hashOf(gvk, ns, name)
		if first == "" {
			t.Fatalf("%s %s/%s not stamped on create under the chart's ServiceAccount", gvk.Kind, ns, name)
		}
		change()
		framework.Eventually(t, 30*time.Second, gvk.Kind+" "+name+" rolled under the ServiceAccount", func() error {
			if h, _, g := hashOf(gvk, ns, name); h == first || g != gen+1 {
				return fmt.Errorf("generation %d (was %d), hash %s", g, gen, h)
			}
			return nil
		})
	}
	patch := func(obj client.Object, p string) func() {
		return func() {
			if err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(p))); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Opted in by namespace: a Deployment consuming a Secret, a DaemonSet and a Rollout
	// consuming a ConfigMap.
	ns := env.NewNamespace(t, true)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, StringData: map[string]string{"password": "hunter2"}}
	create(secret)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cfg"}, Data: map[string]string{"k": "1"}}
	create(cm)
	sel, l := selector("app")
	create(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Spec: appsv1.DeploymentSpec{
		Selector: sel, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: podSpec(fromSecret)}}})
	deployment := appsv1.SchemeGroupVersion.WithKind("Deployment")
	if _, sources, _ := hashOf(deployment, ns, "app"); !strings.HasPrefix(sources, "secret/db=") || strings.Contains(sources, "hunter2") {
		t.Errorf("sources %q, want secret/db=<keyed digest>", sources)
	}
	rollsOnce(deployment, ns, "app", patch(secret, `{"stringData":{"password":"hunter3"}}`))

	sel, l = selector("agent")
	create(&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"}, Spec: appsv1.DaemonSetSpec{
		Selector: sel, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: podSpec(fromConfigMap)}}})
	tmpl, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "canary"}}, Spec: podSpec(fromConfigMap)})
	if err != nil {
		t.Fatal(err)
	}
	rollout := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
		"metadata": map[string]any{"namespace": ns, "name": "canary"},
		"spec":     map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "canary"}}, "template": tmpl},
	}}
	create(rollout)
	rollsOnce(appsv1.SchemeGroupVersion.WithKind("DaemonSet"), ns, "agent", patch(cm, `{"data":{"k":"2"}}`))
	if h, _, _ := hashOf(rollout.GroupVersionKind(), ns, "canary"); h == "" {
		t.Error("Rollout not stamped under the chart's ServiceAccount")
	}

	// Opted in by its own label, in a namespace without it: a StatefulSet.
	other := env.NewNamespace(t, false)
	otherCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "cfg"}, Data: map[string]string{"k": "1"}}
	create(otherCM)
	sel, l = selector("store")
	create(&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "store", Labels: map[string]string{stamp.InjectLabel: stamp.InjectValue}},
		Spec: appsv1.StatefulSetSpec{ServiceName: "store", Selector: sel, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: podSpec(fromConfigMap)}}})
	rollsOnce(appsv1.SchemeGroupVersion.WithKind("StatefulSet"), other, "store", patch(otherCM, `{"data":{"k":"2"}}`))
	sel, l = selector("plain")
	create(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "plain"}, Spec: appsv1.DeploymentSpec{
		Selector: sel, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: podSpec(fromConfigMap)}}})
	if h, _, _ := hashOf(deployment, other, "plain"); h != "" {
		t.Errorf("a Deployment opted in neither way was stamped: %s", h)
	}

	for _, p := range []*framework.Configstamp{cs, watcher} {
		if out := p.Output(); strings.Contains(out, "forbidden") {
			t.Fatalf("configstamp hit a permission it lacks:\n%s", out)
		}
	}
	// The webhook's ServiceAccount reads a consumed Secret, and lists none.
	canIAs(t, "configstamp-webhook", map[string]string{
		"get secrets -n " + ns:                "yes",
		"list secrets -n " + ns:               "no",
		"watch secrets --all-namespaces":      "no",
		"patch rollouts.argoproj.io -n " + ns: "no",
		"patch deployments -n " + ns:          "no",
	})
	canI(t, map[string]string{
		"watch secrets --all-namespaces":                        "yes",
		"get secrets -n " + ns:                                  "yes",
		"update secrets -n " + ns:                               "no",
		"create secrets -n " + ns:                               "no",
		"create secrets -n " + releaseNS:                        "no",
		"update secrets/configstamp-hash-key -n " + releaseNS:   "yes",
		"update secrets/other -n " + releaseNS:                  "no",
		"delete secrets/configstamp-hash-key -n " + releaseNS:   "no",
		"patch rollouts.argoproj.io -n " + ns:                   "yes",
		"delete rollouts.argoproj.io -n " + ns:                  "no",
		"watch customresourcedefinitions.apiextensions.k8s.io":  "no",
		"update customresourcedefinitions.apiextensions.k8s.io": "no",
		"patch statefulsets -n " + other:                        "yes",
		"list controllerrevisions -n " + other:                  "yes",
		"create tokenreviews.authentication.k8s.io":             "yes",
		"create subjectaccessreviews.authorization.k8s.io":      "yes",
		"get /metrics": "no",
	})
}

// TestChartSelfSignedWorksUnderItsRBAC installs the chart in self-signed mode and runs
// the webhook role with the flags the chart renders, under its ServiceAccount
// configstamp-webhook (the watcher's configstamp may not touch the certificate): it fills
// the chart's empty Secret, puts its CA into the registration, serves admission, and
// repairs a wiped caBundle within seconds through its watch of the registration by name,
// which the chart's grant (get, list, watch on that one name) must allow.
func TestChartSelfSignedWorksUnderItsRBAC(t *testing.T) {
	values := []string{"--set", "certificates.mode=self-signed"}
	installChart(t, values...)
	flags := processFlags(t, render(t, values...))
	port, certDir, _ := outOfCluster(t)
	// The webhook role, which keeps the certificate, as its own ServiceAccount. The serving
	// certificate names the address the API server calls here, not the Service.
	cs := env.Start(t, framework.Options{
		Kubeconfig: env.ServiceAccountKubeconfig(t, releaseNS, "configstamp-webhook"), SkipRegistration: true, WebhookPort: port,
		Args: []string{"--role=" + flags["--role"], "--webhook-cert-dir", certDir, "--self-signed-secret=" + flags["--self-signed-secret"], "--self-signed-hosts=127.0.0.1",
			"--ca-switch-delay=" + flags["--ca-switch-delay"], "--hash-key=" + flags["--hash-key"], "--watcher-user=" + flags["--watcher-user"]},
	})
	if _, ok := flags["--tls-secret"]; ok {
		t.Error("self-signed mode renders --tls-secret")
	}
	ctx := context.Background()
	c := env.Client
	var secret corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: releaseNS, Name: "configstamp-webhook-tls"}, &secret); err != nil {
		t.Fatal(err)
	}
	if len(secret.Data) == 0 || flags["--self-signed-secret"] != releaseNS+"/configstamp-webhook-tls" {
		t.Fatalf("--self-signed-secret=%s; the chart's Secret holds %d keys", flags["--self-signed-secret"], len(secret.Data))
	}
	framework.Eventually(t, 10*time.Second, "caBundle filled", bundlesAre(nil))
	wipeAndRepair(t, nil)

	if out := cs.Output(); strings.Contains(out, "forbidden") {
		t.Fatalf("configstamp hit a permission it lacks:\n%s", out)
	}
	canIAs(t, "configstamp-webhook", map[string]string{
		"watch mutatingwebhookconfigurations/configstamp":        "yes",
		"update mutatingwebhookconfigurations/configstamp":       "no",
		"patch mutatingwebhookconfigurations/configstamp":        "yes",
		"list mutatingwebhookconfigurations":                     "no",
		"update mutatingwebhookconfigurations/other":             "no",
		"update secrets/configstamp-webhook-tls -n " + releaseNS: "yes",
		"update secrets/other -n " + releaseNS:                   "no",
		"get secrets -n " + releaseNS:                            "no",
	})
	// The watcher's ServiceAccount holds nothing of the certificate.
	canI(t, map[string]string{
		"get secrets/configstamp-webhook-tls -n " + releaseNS:    "no",
		"update secrets/configstamp-webhook-tls -n " + releaseNS: "no",
		"watch mutatingwebhookconfigurations/configstamp":        "no",
		"patch mutatingwebhookconfigurations/configstamp":        "yes",
	})
	// Its patch of the registration (RBAC cannot limit fields) may write configstamp.io/
	// annotations, never the caBundle: the self policy keeps that the webhook role's.
	watcher := "--as=system:serviceaccount:" + releaseNS + ":configstamp"
	framework.Eventually(t, time.Minute, "the watcher's caBundle patch denied", func() error {
		out, err := toolErr("kubectl", "patch", "mutatingwebhookconfiguration", "configstamp", watcher, "--type=json",
			"-p", `[{"op":"replace","path":"/webhooks/0/clientConfig/caBundle","value":"`+base64.StdEncoding.EncodeToString([]byte("not a CA"))+`"}]`)
		if err == nil || !strings.Contains(out, "only configstamp's webhook role changes its registration's caBundle") {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	for _, v := range []string{`"x"`, "null"} {
		tool(t, "kubectl", "patch", "mutatingwebhookconfiguration", "configstamp", watcher, "--type=merge",
			"-p", `{"metadata":{"annotations":{"configstamp.io/probe":`+v+`}}}`)
	}
	framework.Eventually(t, 10*time.Second, "caBundle kept", bundlesAre(nil))
	checkHashKeyPolicy(t)
}

// checkHashKeyPolicy: neither ServiceAccount may replace the hash key it filled (that
// would roll every stamped workload), and either may fill an emptied one.
func checkHashKeyPolicy(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	ref := client.ObjectKey{Namespace: releaseNS, Name: "configstamp-hash-key"}
	var held corev1.Secret
	if err := env.Client.Get(ctx, ref, &held); err != nil {
		t.Fatal(err)
	}
	as := map[string]client.Client{}
	for _, sa := range []string{"configstamp-webhook", "configstamp"} {
		cfg, err := clientcmd.BuildConfigFromFlags("", env.ServiceAccountKubeconfig(t, releaseNS, sa))
		if err != nil {
			t.Fatal(err)
		}
		if as[sa], err = client.New(cfg, client.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	// update sets the key as the ServiceAccount sa (its grant: get and update).
	update := func(sa string) error {
		c := as[sa]
		var s corev1.Secret
		if err := c.Get(ctx, ref, &s); err != nil {
			return err
		}
		s.Data = map[string][]byte{"key": []byte(strings.Repeat("k", 32))}
		return c.Update(ctx, &s)
	}
	for _, sa := range []string{"configstamp-webhook", "configstamp"} {
		framework.Eventually(t, time.Minute, sa+"'s replacement of the hash key denied", func() error {
			if err := update(sa); err == nil || !strings.Contains(err.Error(), "never replaces a key it holds") {
				return fmt.Errorf("%v", err)
			}
			return nil
		})
	}
	tool(t, "kubectl", "patch", "secret", ref.Name, "-n", releaseNS, "--type=json", "-p", `[{"op":"remove","path":"/data/key"}]`)
	if err := update("configstamp-webhook"); err != nil {
		t.Errorf("filling the emptied hash key: %v", err)
	}
	tool(t, "kubectl", "patch", "secret", ref.Name, "-n", releaseNS, "--type=merge", "-p",
		`{"data":{"key":"`+base64.StdEncoding.EncodeToString(held.Data["key"])+`"}}`)
}
