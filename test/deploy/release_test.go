package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

// releasedChart is the chart as last released, kept as a fixture so the test needs no
// Git history (test/testdata/chart-0.1.0: the chart of 8278812, the state before the
// first release; at each release, replace it with the released chart).
var releasedChart = filepath.Join(cluster.RepoRoot(), "test", "testdata", "chart-0.1.0")

const upgradeVersion = "v0.2.0-upgradetest"

// TestChartUpgradeFromReleaseRollsNothing installs the released chart, packaged, with
// Secrets on; runs configstamp with the args of the Deployments helm installed; creates
// Deployments stamped from a ConfigMap and from a Secret. Then helm upgrade to this
// tree's chart as make chart-package packages it (its version and appVersion from
// VERSION), and helm rollback to the release: each time the processes are replaced by
// ones with the new Deployments' args, and no Deployment's generation or stamp moves.
// Last, a change of each source rolls each consumer once (the processes work).
func TestChartUpgradeFromReleaseRollsNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tool(t, "helm", "package", releasedChart, "-d", dir)
	oldChart := filepath.Join(dir, "configstamp-0.1.0.tgz")
	mk := exec.Command("make", "-s", "chart-package", "VERSION="+upgradeVersion, "BIN="+dir)
	mk.Dir = cluster.RepoRoot()
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make chart-package: %v\n%s", err, out)
	}
	newChart := filepath.Join(dir, "chart", "configstamp-"+strings.TrimPrefix(upgradeVersion, "v")+".tgz")
	values := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(values, []byte("secrets:\n  enabled: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	applyCertManagerCRDs(t)
	tool(t, "helm", "uninstall", "configstamp", "--namespace", releaseNS, "--ignore-not-found", "--wait")
	tool(t, "helm", "install", "configstamp", oldChart, "--namespace", releaseNS, "--create-namespace", "-f", values, "--wait=false")
	t.Cleanup(func() { _, _ = toolErr("helm", "uninstall", "configstamp", "--namespace", releaseNS, "--wait") })
	certArgs, _ := certManagerMode(t, installedFlags(t, "configstamp"))
	port := freePort(t)
	px := framework.NewProxy(t, fmt.Sprintf("127.0.0.1:%d", port)) // the Service
	kubeconfig := repointAt(t, nil, portOf(t, px.Addr))
	procs := startInstalled(t, px, port, kubeconfig, certArgs, nil)

	ns := env.NewNamespace(t, true)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cfg"}, Data: map[string]string{"k": "1"}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cred"}, StringData: map[string]string{"k": "1"}}
	for _, o := range []client.Object{cm, secret} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	before := map[string]appsv1.Deployment{}
	for i := range 4 {
		d := consumer(ns, fmt.Sprintf("app-%d", i))
		if i%2 == 1 {
			d.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cred"}}}}
		}
		if err := env.Client.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
		if d.Spec.Template.Annotations[stamp.HashAnnotation] == "" {
			t.Fatalf("%s not stamped at creation", d.Name)
		}
		before[d.Name] = *d
	}

	// Each helm command renders the registration with the chart's Service; it is pointed
	// back at the proxy after (see TestChartUpgradeToSplitRollsNothing).
	for _, step := range []struct {
		name    string
		args    []string
		image   string
		chartID string
	}{
		{"upgrade", []string{"upgrade", "configstamp", newChart, "-f", values}, upgradeVersion, "configstamp-" + strings.TrimPrefix(upgradeVersion, "v")},
		{"rollback", []string{"rollback", "configstamp", "1"}, "0.1.0", "configstamp-0.1.0"},
	} {
		bundle := setServiceConfig(t, decodeAll(t, tool(t, "helm", "get", "manifest", "configstamp", "--namespace", releaseNS)))
		t.Logf("helm %s: %s", step.name, tool(t, "helm", append(step.args, "--namespace", releaseNS, "--wait=false")...))
		repointAt(t, bundle, portOf(t, px.Addr))
		checkRelease(t, step.chartID, step.image)
		procs = startInstalled(t, px, freePort(t), kubeconfig, certArgs, procs)
		servedAgain(t, ns)
		framework.Consistently(t, 8*time.Second, "after helm "+step.name+", no Deployment's stamp or generation moved", func() error {
			return unchanged(ctx, before)
		})
	}

	// The processes of the released chart work: a change of each source rolls its consumers once.
	for _, o := range []client.Object{cm, secret} {
		patch := `{"data":{"k":"Mg=="}}`
		if o == client.Object(cm) {
			patch = `{"data":{"k":"2"}}`
		}
		if err := env.Client.Patch(ctx, o, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatal(err)
		}
	}
	rolledOnce := rolledOnceSince(ctx, ns, before)
	framework.Eventually(t, time.Minute, "every consumer rolled by its source's change", rolledOnce)
	framework.Consistently(t, 5*time.Second, "every consumer rolled once", rolledOnce)
}

// checkRelease: helm's release and the Deployments carry the chart version and the
// image tag (the appVersion) expected.
func checkRelease(t *testing.T, chartID, image string) {
	t.Helper()
	var releases []struct{ Name, Chart string }
	if err := json.Unmarshal([]byte(tool(t, "helm", "list", "--namespace", releaseNS, "-o", "json")), &releases); err != nil {
		t.Fatal(err)
	}
	if len(releases) != 1 || releases[0].Chart != chartID {
		t.Fatalf("helm list: %+v, want chart %s", releases, chartID)
	}
	for _, name := range []string{"configstamp", "configstamp-watcher"} {
		var d appsv1.Deployment
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: releaseNS, Name: name}, &d); err != nil {
			t.Fatal(err)
		}
		if img := d.Spec.Template.Spec.Containers[0].Image; !strings.HasSuffix(img, ":"+image) {
			t.Fatalf("Deployment %s runs %s, want tag %s", name, img, image)
		}
	}
}

// installedFlags returns the --flag=value args of an installed Deployment of the release.
func installedFlags(t *testing.T, name string) map[string]string {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: releaseNS, Name: name}, u); err != nil {
		t.Fatal(err)
	}
	return flagsOf(t, map[string]*unstructured.Unstructured{"Deployment/" + name: u}, "Deployment/"+name)
}

// localFlags are the installed args that say where a pod listens, logs and finds its
// certificate: the test's processes take their own.
var localFlags = []string{"--webhook-port", "--webhook-cert-dir", "--metrics-bind-address", "--metrics-secure", "--health-probe-bind-address",
	"--shutdown-delay", "--tls-secret", "--ca-switch-delay", "--zap-log-level"}

// startInstalled replaces the processes old (none at first) as a rollout of the
// installed Deployments would: a webhook with Deployment configstamp's args, under its
// ServiceAccount, on port, takes the Service's traffic once ready; a watcher with
// configstamp-watcher's stands by; the old processes stop; the watcher leads.
func startInstalled(t *testing.T, px *framework.Proxy, port int, kubeconfig string, certArgs []string, old []*framework.Configstamp) []*framework.Configstamp {
	t.Helper()
	args := func(name string) []string {
		var out []string
		for k, v := range installedFlags(t, name) {
			if !slices.Contains(localFlags, k) {
				out = append(out, k+"="+v)
			}
		}
		slices.Sort(out)
		return out
	}
	probes := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	hook := env.Start(t, framework.Options{Kubeconfig: env.ServiceAccountKubeconfig(t, releaseNS, "configstamp-webhook"), SkipRegistration: true,
		WebhookPort: port, WebhookURL: "https://" + px.Addr, Args: slices.Concat(certArgs, args("configstamp"), []string{"--health-probe-bind-address=" + probes})})
	framework.Eventually(t, time.Minute, "the new webhook ready", func() error { return ready(probes) })
	px.Switch(fmt.Sprintf("127.0.0.1:%d", port))
	watcher := env.Start(t, framework.Options{Kubeconfig: kubeconfig, NoWebhook: true,
		Args: append(args("configstamp-watcher"), "--leader-election-namespace", releaseNS)})
	for _, p := range old {
		p.Stop()
	}
	framework.Eventually(t, time.Minute, "the watcher leads", func() error {
		if !strings.Contains(watcher.Output(), `"msg":"Successfully acquired lease"`) {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	return []*framework.Configstamp{hook, watcher}
}
