package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/bench"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

// TestChartUpgradeToSplitRollsNothing installs the chart in the single-Deployment layout
// (a copy whose values.yaml says roles.split: false, which renders the Deployment of the
// charts before the split: one process, --role all), runs it under the chart's ServiceAccount, and creates stamped
// Deployments; then helm upgrades to the default split layout and replaces the process
// as the rollout would: the new webhook process (the args of Deployment configstamp, under
// its own ServiceAccount configstamp-webhook, which may patch no workload and list no
// Secret) takes over the Service's traffic, a watcher process (the args of
// configstamp-watcher) stands by on the same Lease, and the old process stops, its
// lease passing to the watcher. Admissions go on throughout, every one stamped; no
// Deployment's stamp or generation moves; and the watcher (ServiceAccount configstamp),
// once leading, still rolls a ConfigMap change into each consumer exactly once: the
// webhook honours its nudges (--watcher-user).
func TestChartUpgradeToSplitRollsNothing(t *testing.T) {
	ctx := context.Background()
	// The chart before the split, as a chart of its own (a chart whose values.yaml says
	// roles.split: false renders what charts before the split did, NetworkPolicy aside):
	// installed with no value set, the upgrade takes the new chart's defaults, as
	// helm upgrade does when given no values.
	oldChart := chartCopy(t, t.TempDir())
	values := filepath.Join(oldChart, "values.yaml")
	raw, err := os.ReadFile(values)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte("\nroles:\n  split: true\n")) {
		t.Fatal("values.yaml sets no roles.split: true")
	}
	if err := os.WriteFile(values, bytes.Replace(raw, []byte("\nroles:\n  split: true\n"), []byte("\nroles:\n  split: false\n"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	oldObjs := decodeAll(t, renderText(t, oldChart))
	if _, ok := oldObjs["Deployment/configstamp-watcher"]; ok {
		t.Fatal("roles.split=false renders a watcher Deployment")
	}
	oldFlags := processFlags(t, oldObjs)
	if _, ok := oldFlags["--role"]; ok || oldFlags["--leader-elect"] != "true" {
		t.Fatalf("roles.split=false: args %v, want the single layout's (no --role, --leader-elect=true)", oldFlags)
	}
	applyCertManagerCRDs(t)
	tool(t, "helm", "uninstall", "configstamp", "--namespace", releaseNS, "--ignore-not-found", "--wait")
	tool(t, "helm", "install", "configstamp", oldChart, "--namespace", releaseNS, "--create-namespace", "--wait=false")
	certArgs, _ := certManagerMode(t, oldFlags)
	oldPort, newPort := freePort(t), freePort(t)
	px := framework.NewProxy(t, fmt.Sprintf("127.0.0.1:%d", oldPort)) // the Service
	kubeconfig := repointAt(t, nil, portOf(t, px.Addr))
	lease := []string{"--leader-election-namespace", releaseNS}
	old := env.Start(t, framework.Options{Kubeconfig: kubeconfig, SkipRegistration: true, WebhookPort: oldPort, WebhookURL: "https://" + px.Addr,
		Args: append(append(certArgs, lease...), "--leader-elect", "--hash-key="+oldFlags["--hash-key"])})

	ns := env.NewNamespace(t, true)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cfg"}, Data: map[string]string{"k": "1"}}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	before := map[string]appsv1.Deployment{}
	for i := range 5 {
		d := consumer(ns, fmt.Sprintf("app-%d", i))
		if err := env.Client.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
		if d.Spec.Template.Annotations[stamp.HashAnnotation] == "" {
			t.Fatalf("%s not stamped at creation", d.Name)
		}
		before[d.Name] = *d
	}
	admit := admitting(t, ns)

	// helm could not merge the registration this test points at the proxy (a URL where the
	// chart has the Service): while helm upgrades, it is the chart's again; no admission
	// is made meanwhile (in a cluster, the Service stays where it is).
	admit.while(func() {
		bundle := setServiceConfig(t, oldObjs)
		t.Logf("helm upgrade: %s", tool(t, "helm", "upgrade", "configstamp", chart, "--namespace", releaseNS, "--wait=false"))
		repointAt(t, bundle, portOf(t, px.Addr))
		servedAgain(t, ns)
	})
	// The release now holds both Deployments (read back from the cluster).
	newObjs := map[string]*unstructured.Unstructured{}
	for _, name := range []string{"configstamp", "configstamp-watcher"} {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: releaseNS, Name: name}, u); err != nil {
			t.Fatalf("after helm upgrade: %v", err)
		}
		newObjs["Deployment/"+name] = u
	}
	hookFlags, watcherFlags := processFlags(t, newObjs), flagsOf(t, newObjs, "Deployment/configstamp-watcher")
	if hookFlags["--role"] != "webhook" || watcherFlags["--role"] != "watcher" || watcherFlags["--leader-elect"] != "true" {
		t.Fatalf("split layout: webhook args %v, watcher args %v", hookFlags, watcherFlags)
	}
	// The webhook runs as its own ServiceAccount, honouring the watcher's markers
	// (--watcher-user); the watcher stays configstamp, the old process's user.
	if want := "system:serviceaccount:" + releaseNS + ":configstamp"; hookFlags["--watcher-user"] != want {
		t.Fatalf("the webhook's --watcher-user=%q, want %s", hookFlags["--watcher-user"], want)
	}
	hookKubeconfig := env.ServiceAccountKubeconfig(t, releaseNS, "configstamp-webhook")
	probes := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	mark := bench.MarkAudit(env.Cluster.AuditLog)
	hook := env.Start(t, framework.Options{Kubeconfig: hookKubeconfig, SkipRegistration: true, WebhookPort: newPort, WebhookURL: "https://" + px.Addr,
		Args: append(certArgs, "--role="+hookFlags["--role"], "--hash-key="+hookFlags["--hash-key"], "--health-probe-bind-address="+probes,
			"--watcher-user="+hookFlags["--watcher-user"])})
	// The Service sends the new pod traffic once it is ready (its Namespace cache synced).
	framework.Eventually(t, time.Minute, "the new webhook ready", func() error { return ready(probes) })
	admit.while(func() { px.Switch(fmt.Sprintf("127.0.0.1:%d", newPort)) })
	watcher := env.Start(t, framework.Options{Kubeconfig: kubeconfig, NoWebhook: true,
		Args: append(lease, "--role="+watcherFlags["--role"], "--leader-elect", "--hash-key="+watcherFlags["--hash-key"])})
	old.Stop()
	framework.Eventually(t, time.Minute, "the watcher leads", func() error {
		if !strings.Contains(watcher.Output(), `"msg":"Successfully acquired lease"`) {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	// The new leader checks every workload at start: give it the time to (it nudges
	// nothing that holds).
	framework.Consistently(t, 10*time.Second, "no Deployment's stamp or generation moved", func() error {
		return unchanged(ctx, before)
	})
	if n := admit.stop(); n == 0 {
		t.Fatal("no admission during the upgrade")
	} else {
		t.Logf("%d admissions during the upgrade, every one stamped", n)
	}
	for _, p := range []*framework.Configstamp{hook, watcher} {
		if strings.Contains(p.Output(), "forbidden") {
			t.Fatalf("a process hit a permission it lacks:\n%s", p.Output())
		}
	}

	webhookHeldNoInformer(t, mark, oldFlags["--tls-secret"])
	// The webhook's ServiceAccount can write no workload and read no Secret but its own
	// two, whatever its pods are made to send.
	canIAs(t, "configstamp-webhook", map[string]string{
		"get configmaps -n " + ns:                                    "yes",
		"list configmaps -n " + ns:                                   "no",
		"watch configmaps --all-namespaces":                          "no",
		"patch deployments -n " + ns:                                 "no",
		"update deployments -n " + ns:                                "no",
		"get deployments -n " + ns:                                   "no",
		"patch statefulsets -n " + ns:                                "no",
		"patch daemonsets -n " + ns:                                  "no",
		"list secrets --all-namespaces":                              "no",
		"list secrets -n " + releaseNS:                               "no",
		"get secrets -n " + ns:                                       "no",
		"get secrets/configstamp-hash-key -n " + releaseNS:           "yes",
		"watch secrets/configstamp-cert-manager-tls -n " + releaseNS: "yes",
		"create leases -n " + releaseNS:                              "no",
		"update leases/configstamp-watcher -n " + releaseNS:          "no",
		"list namespaces":                                            "yes",
		"patch mutatingwebhookconfigurations/configstamp":            "yes",
		"patch mutatingwebhookconfigurations/other":                  "no",
		"create events -n " + ns:                                     "no",
	})

	// The watcher works: a change rolls each consumer once.
	if err := env.Client.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte(`{"data":{"k":"2"}}`))); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, "every consumer rolled once by the watcher", rolledOnceSince(ctx, ns, before))
	framework.Consistently(t, 5*time.Second, "each consumer rolled once (the watcher's nudge honoured by the webhook's other user)", rolledOnceSince(ctx, ns, before))
	// The watcher's writes carry configstamp's field manager, as the single layout's did
	// (not one taken from the role's user agent).
	for name := range before {
		var d appsv1.Deployment
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
			t.Fatal(err)
		}
		var managers []string
		for _, e := range d.ManagedFields {
			managers = append(managers, e.Manager)
		}
		if !slices.Contains(managers, "configstamp") || slices.Contains(managers, "configstamp-watcher") {
			t.Fatalf("%s: field managers %v, want configstamp's writes under configstamp", name, managers)
		}
	}

	rollBackToSingle(t, ns, cm, oldObjs, px, kubeconfig, slices.Concat(certArgs, lease, []string{"--leader-elect", "--hash-key=" + oldFlags["--hash-key"]}), hook, watcher)
}

// rollBackToSingle helm upgrades back to roles.split=false (as a rollback renders it)
// and replaces the processes as that rollout would: the watcher's Deployment is deleted,
// so the watcher stops (its Lease released) first; a change of cm is made while no
// process leads; a --role all process (allArgs) then takes the Service's traffic and the
// Lease, and the webhook process stops. Admissions go on throughout, every one stamped;
// the change made in the gap rolls each consumer exactly once.
func rollBackToSingle(t *testing.T, ns string, cm *corev1.ConfigMap, oldObjs map[string]*unstructured.Unstructured, px *framework.Proxy,
	kubeconfig string, allArgs []string, hook, watcher *framework.Configstamp) {
	t.Helper()
	ctx := context.Background()
	var deps appsv1.DeploymentList
	if err := env.Client.List(ctx, &deps, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	before := map[string]appsv1.Deployment{}
	for _, d := range deps.Items {
		before[d.Name] = d
	}
	// The registration goes to the chart's Service and back to the proxy around helm (see
	// above): the admissions start once the API server calls the proxy again, steadily.
	bundle := setServiceConfig(t, oldObjs)
	t.Logf("helm upgrade --set roles.split=false: %s", tool(t, "helm", "upgrade", "configstamp", chart, "--namespace", releaseNS, "--set", "roles.split=false", "--wait=false"))
	repointAt(t, bundle, portOf(t, px.Addr))
	servedAgain(t, ns)
	framework.Consistently(t, 3*time.Second, "the API server calls the webhook", func() error {
		d := consumer(ns, "probe")
		if err := env.Client.Create(ctx, d, client.DryRunAll); err != nil {
			return err
		}
		if d.Spec.Template.Annotations[stamp.HashAnnotation] == "" {
			return fmt.Errorf("answered unstamped")
		}
		return nil
	})
	admit := admitting(t, ns)
	var gone appsv1.Deployment
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: releaseNS, Name: "configstamp-watcher"}, &gone); !apierrors.IsNotFound(err) {
		t.Fatalf("after the rollback, Deployment configstamp-watcher: %v, want it deleted", err)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: releaseNS, Name: "configstamp"}, u); err != nil {
		t.Fatal(err)
	}
	if flags := processFlags(t, map[string]*unstructured.Unstructured{"Deployment/configstamp": u}); flags["--role"] != "" || flags["--leader-elect"] != "true" {
		t.Fatalf("after the rollback, Deployment configstamp's args %v, want the single layout's (no --role, --leader-elect=true)", flags)
	}

	watcher.Stop()
	if err := env.Client.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte(`{"data":{"k":"3"}}`))); err != nil {
		t.Fatal(err)
	}
	allPort, probes := freePort(t), fmt.Sprintf("127.0.0.1:%d", freePort(t))
	all := env.Start(t, framework.Options{Kubeconfig: kubeconfig, SkipRegistration: true, WebhookPort: allPort, WebhookURL: "https://" + px.Addr,
		Args: append(slices.Clone(allArgs), "--health-probe-bind-address="+probes)})
	framework.Eventually(t, time.Minute, "the --role all process ready", func() error { return ready(probes) })
	admit.while(func() { px.Switch(fmt.Sprintf("127.0.0.1:%d", allPort)) })
	hook.Stop()
	framework.Eventually(t, time.Minute, "the change made while nothing led rolled each consumer", func() error {
		for name, b := range before {
			var d appsv1.Deployment
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
				return err
			}
			if d.Generation != b.Generation+1 || d.Spec.Template.Annotations[stamp.HashAnnotation] == b.Spec.Template.Annotations[stamp.HashAnnotation] {
				return fmt.Errorf("%s: generation %d (was %d)", name, d.Generation, b.Generation)
			}
		}
		return nil
	})
	framework.Consistently(t, 5*time.Second, "each consumer rolled once", func() error {
		for name, b := range before {
			var d appsv1.Deployment
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
				return err
			}
			if d.Generation != b.Generation+1 {
				return fmt.Errorf("%s: generation %d (was %d)", name, d.Generation, b.Generation)
			}
		}
		return nil
	})
	if n := admit.stop(); n == 0 {
		t.Fatal("no admission during the rollback")
	} else {
		t.Logf("%d admissions during the rollback, every one stamped", n)
	}
	if strings.Contains(all.Output(), "forbidden") {
		t.Fatalf("the --role all process hit a permission it lacks:\n%s", all.Output())
	}
}

// webhookHeldNoInformer reads the audit log from mark: the webhook role's requests
// (user agent configstamp-webhook, its own ServiceAccount) list or watch only
// Namespaces (its scope check), the registration and its TLS Secret (its certificate
// mode, by name), and touch no Lease and patch no workload.
func webhookHeldNoInformer(t *testing.T, mark bench.AuditMark, tlsSecret string) {
	t.Helper()
	_, secret, _ := strings.Cut(tlsSecret, "/")
	user := "system:serviceaccount:" + releaseNS + ":configstamp-webhook"
	var seen int
	var wrong []string
	err := bench.ReadAuditStrict(env.Cluster.AuditLog, mark, func(ev *bench.AuditEvent) {
		if ev.UserAgent != "configstamp-webhook" {
			return
		}
		seen++
		r := ev.ObjectRef.Resource
		listed := ev.Verb == "list" || ev.Verb == "watch"
		switch {
		case ev.User.Username != user:
			wrong = append(wrong, ev.Verb+" "+r+" as "+ev.User.Username)
		case r == "leases",
			listed && r != "namespaces" && r != "mutatingwebhookconfigurations" && !(r == "secrets" && ev.ObjectRef.Name == secret),
			ev.Verb == "patch" && r != "mutatingwebhookconfigurations":
			wrong = append(wrong, ev.Verb+" "+r+"/"+ev.ObjectRef.Name)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen == 0 || len(wrong) > 0 {
		t.Fatalf("the webhook role made %d requests; not its own: %v", seen, wrong)
	}
	t.Logf("the webhook role made %d requests, none of the watcher's", seen)
}

// setServiceConfig sets every entry's clientConfig back to the rendered one's (the
// Service), keeping the caBundle configstamp published, and returns that bundle.
func setServiceConfig(t *testing.T, objs map[string]*unstructured.Unstructured) []byte {
	t.Helper()
	rendered := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration/configstamp")
	bundles, err := caBundles()
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for i, w := range rendered.Webhooks {
		cc := w.ClientConfig
		cc.CABundle = bundles[i]
		value, err := json.Marshal(cc)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, fmt.Sprintf(`{"op":"replace","path":"/webhooks/%d/clientConfig","value":%s}`, i, value))
	}
	tool(t, "kubectl", "patch", "mutatingwebhookconfiguration", "configstamp", "--type=json", "-p", "["+strings.Join(ops, ",")+"]")
	return bundles[0]
}

// ready asks the probe address's /readyz.
func ready(addr string) error {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}

// servedAgain waits until the API server, having seen the registration pointed back at
// the proxy, calls the webhook again (a dry run comes back stamped).
func servedAgain(t *testing.T, ns string) {
	t.Helper()
	framework.Eventually(t, time.Minute, "the API server calls the webhook again", func() error {
		d := consumer(ns, "probe")
		if err := env.Client.Create(context.Background(), d, client.DryRunAll); err != nil {
			return err
		}
		if d.Spec.Template.Annotations[stamp.HashAnnotation] == "" {
			return fmt.Errorf("not stamped yet")
		}
		return nil
	})
}

// unchanged checks that each Deployment of before has its generation and stamp still.
func unchanged(ctx context.Context, before map[string]appsv1.Deployment) error {
	for name, b := range before {
		var d appsv1.Deployment
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: name}, &d); err != nil {
			return err
		}
		if d.Generation != b.Generation || d.Spec.Template.Annotations[stamp.HashAnnotation] != b.Spec.Template.Annotations[stamp.HashAnnotation] {
			return fmt.Errorf("%s: generation %d (was %d), stamp %q (was %q)", name, d.Generation, b.Generation,
				d.Spec.Template.Annotations[stamp.HashAnnotation], b.Spec.Template.Annotations[stamp.HashAnnotation])
		}
	}
	return nil
}

// consumer is a Deployment that takes the ConfigMap cfg as env.
func consumer(ns, name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1",
					EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}}}}},
	}
}

// flagsOf is processFlags for another Deployment of the rendered chart.
func flagsOf(t *testing.T, objs map[string]*unstructured.Unstructured, key string) map[string]string {
	t.Helper()
	dep := typed[appsv1.Deployment](t, objs, key)
	flags := map[string]string{}
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		if k, v, ok := strings.Cut(a, "="); ok {
			flags[k] = v
		}
	}
	return flags
}

func freePort(t *testing.T) int {
	t.Helper()
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	var port int
	if _, err := fmt.Sscanf(addr[strings.LastIndex(addr, ":")+1:], "%d", &port); err != nil {
		t.Fatal(err)
	}
	return port
}

// admitter makes server-side dry-run creates of a consumer of cfg, one after another,
// until stopped, and remembers the first answered unstamped (failed open) or refused.
type admitter struct {
	t      *testing.T
	mu     sync.Mutex // held for each admission
	done   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
	made   int
	failed error
}

func admitting(t *testing.T, ns string) *admitter {
	a := &admitter{t: t, done: make(chan struct{})}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		for {
			select {
			case <-a.done:
				return
			default:
			}
			a.mu.Lock()
			d := consumer(ns, "admitted")
			err := env.Client.Create(context.Background(), d, client.DryRunAll)
			switch {
			case err != nil:
				a.failed = fmt.Errorf("admission %d: %w", a.made+1, err)
			case d.Spec.Template.Annotations[stamp.HashAnnotation] == "":
				a.failed = fmt.Errorf("admission %d answered unstamped", a.made+1)
			}
			a.made++
			failed := a.failed != nil
			a.mu.Unlock()
			if failed {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	t.Cleanup(a.end)
	return a
}

func (a *admitter) end() { a.once.Do(func() { close(a.done); a.wg.Wait() }) }

// while runs f between two admissions.
func (a *admitter) while(f func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f()
}

// stop ends the admissions, fails the test on a failed one, and returns how many were made.
func (a *admitter) stop() int {
	a.end()
	if a.failed != nil {
		a.t.Fatal(a.failed)
	}
	return a.made
}

// rolledOnceSince checks that each Deployment of ns in before moved by exactly one
// generation since, to a new stamp: one rollout each.
func rolledOnceSince(ctx context.Context, ns string, before map[string]appsv1.Deployment) func() error {
	return func() error {
		for name, b := range before {
			var d appsv1.Deployment
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
				return err
			}
			if d.Generation != b.Generation+1 || d.Spec.Template.Annotations[stamp.HashAnnotation] == b.Spec.Template.Annotations[stamp.HashAnnotation] {
				return fmt.Errorf("%s: generation %d (was %d)", name, d.Generation, b.Generation)
			}
		}
		return nil
	}
}
