package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/configstamp/configstamp/certs"
	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/namespaced"
	"github.com/configstamp/configstamp/webhook"
)

// renderList runs helm template and returns every object, in order (a namespaced
// install renders a Role of one name in several namespaces).
func renderList(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(renderText(t, chart, args...))), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("decode rendered chart: %v", err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

func convert[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &out); err != nil {
		t.Fatalf("convert %s/%s: %v", u.GetKind(), u.GetName(), err)
	}
	return &out
}

// TestRenderNamespaced: with watchNamespaces, the chart grants through Roles alone (the
// grants of the cluster-wide install, in each watched namespace but an excluded one, and
// none on Namespaces), renders no ClusterRole or ClusterRoleBinding whatever else is on,
// registers the watched namespaces only, exactly as configstamp does for the flags it
// passes, and refuses what a namespaced install cannot do.
func TestRenderNamespaced(t *testing.T) {
	for _, secrets := range []bool{false, true} {
		for _, rollouts := range []bool{false, true} {
			t.Run(fmt.Sprintf("secrets=%v/argoRollouts=%v", secrets, rollouts), func(t *testing.T) {
				checkNamespaced(t, secrets, rollouts)
			})
		}
	}
	for _, bad := range [][]string{
		{"--set-json", `watchNamespaces=["kube-system"]`},
		{"--set-json", `watchNamespaces=["a"]`, "--set", "certificates.mode=self-signed"},
	} {
		if out, err := toolErr("helm", append([]string{"template", "configstamp", chart, "--namespace", releaseNS}, bad...)...); err == nil {
			t.Errorf("%v rendered:\n%.300s", bad, out)
		}
	}
}

func checkNamespaced(t *testing.T, secrets, rollouts bool) {
	t.Helper()
	args := []string{"--set-json", `watchNamespaces=["b","a","kube-system"]`, "--set", "metrics.secure=true",
		"--set", fmt.Sprintf("secrets.enabled=%v", secrets), "--set", fmt.Sprintf("argoRollouts.enabled=%v", rollouts)}
	list := renderList(t, args...)
	perNS := grants{}
	perNS.add("/configmaps", "", "get", "list", "watch")
	for _, res := range []string{"deployments", "statefulsets", "daemonsets"} {
		perNS.add("apps/"+res, "", "get", "list", "watch", "patch")
	}
	perNS.add("batch/cronjobs", "", "get", "list", "watch", "patch")
	perNS.add("apps/replicasets", "", "list")
	perNS.add("apps/controllerrevisions", "", "list")
	perNS.add("events.k8s.io/events", "", "create", "patch")
	perNS.add("/events", "", "create", "patch")
	if secrets {
		perNS.add("/secrets", "", "get", "list", "watch")
	}
	if rollouts {
		perNS.add("argoproj.io/rollouts", "", "get", "list", "watch", "patch")
	}
	own := grants{}
	own.add("coordination.k8s.io/leases", "", "create")
	own.add("coordination.k8s.io/leases", "configstamp-watcher", "get", "update")
	own.add("/configmaps", "configstamp-coverage", "get", "patch")
	own.add("events.k8s.io/events", "", "create", "patch")
	own.add("/events", "", "create", "patch")
	// The hash key of every digest: the chart creates the Secret; no create.
	own.add("/secrets", "configstamp-hash-key", "get", "update")
	// The webhook's ServiceAccount: get of the sources and CronJobs in each watched namespace, the
	// hash key in its own; nothing else (the certificate Secret is mounted).
	hookPerNS, hookOwn := grants{}, grants{}
	hookPerNS.add("/configmaps", "", "get")
	if secrets {
		hookPerNS.add("/secrets", "", "get")
	}
	hookPerNS.add("batch/cronjobs", "", "get")
	hookOwn.add("/secrets", "configstamp-hash-key", "get", "update")
	var roles, bindings, hookRoles []string
	for _, u := range list {
		if u.GetName() == "configstamp-webhook" && (u.GetKind() == "Role" || u.GetKind() == "RoleBinding") {
			if u.GetKind() == "Role" {
				hookRoles = append(hookRoles, u.GetNamespace())
				want := hookPerNS
				if u.GetNamespace() == releaseNS {
					want = hookOwn
				}
				checkGrants(t, "Role configstamp-webhook in "+u.GetNamespace(), convert[rbacv1.Role](t, u).Rules, want)
			} else if rb := convert[rbacv1.RoleBinding](t, u); rb.RoleRef.Name != "configstamp-webhook" ||
				!equality.Semantic.DeepEqual(rb.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "configstamp-webhook", Namespace: releaseNS}}) {
				t.Errorf("RoleBinding configstamp-webhook in %s: %+v %+v", u.GetNamespace(), rb.RoleRef, rb.Subjects)
			}
			continue
		}
		switch u.GetKind() {
		case "ClusterRole", "ClusterRoleBinding":
			t.Errorf("a namespaced install renders %s %s", u.GetKind(), u.GetName())
		case "Role":
			roles = append(roles, u.GetNamespace())
			want := perNS
			if u.GetNamespace() == releaseNS {
				want = own
			}
			checkGrants(t, "Role in "+u.GetNamespace(), convert[rbacv1.Role](t, u).Rules, want)
		case "RoleBinding":
			bindings = append(bindings, u.GetNamespace())
			rb := convert[rbacv1.RoleBinding](t, u)
			want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "configstamp", Namespace: releaseNS}}
			if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != "configstamp" || !equality.Semantic.DeepEqual(rb.Subjects, want) {
				t.Errorf("RoleBinding in %s: %+v %+v", u.GetNamespace(), rb.RoleRef, rb.Subjects)
			}
		}
	}
	slices.Sort(roles)
	slices.Sort(bindings)
	slices.Sort(hookRoles)
	if want := []string{"a", "b", releaseNS}; !slices.Equal(roles, want) || !slices.Equal(bindings, want) || !slices.Equal(hookRoles, want) {
		t.Errorf("Roles in %v, RoleBindings in %v, want both in %v (kube-system is excluded)", roles, bindings, want)
	}

	objs := render(t, args...)
	flags := processFlags(t, objs)
	want := map[string]string{"--watch-namespaces": "a,b", "--coverage-configmap": releaseNS + "/configstamp-coverage", "--metrics-secure": "false"}
	for k, v := range want {
		if flags[k] != v {
			t.Errorf("%s=%q, want %q", k, flags[k], v)
		}
	}
	for _, k := range []string{"--tls-secret", "--self-signed-secret"} {
		if _, ok := flags[k]; ok {
			t.Errorf("%s passed: that mode writes the registration", k)
		}
	}
	dep := typed[appsv1.Deployment](t, objs, "Deployment/configstamp")
	if v := dep.Spec.Template.Spec.Volumes[0]; v.Name != "certs" || v.Secret == nil || v.Secret.SecretName != "configstamp-cert-manager-tls" {
		t.Errorf("certs volume %+v, want cert-manager's Secret", v)
	}
	typed[corev1.ConfigMap](t, objs, "ConfigMap/configstamp-coverage")

	// The registration: the watched namespaces only, as configstamp registers them.
	mwc := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration/configstamp")
	if got := mwc.Annotations["cert-manager.io/inject-ca-from"]; got != releaseNS+"/configstamp-webhook" {
		t.Errorf("inject-ca-from %q", got)
	}
	sc, err := scope.NewWatched(flags["--namespace-label"], strings.Split(flags["--exclude-namespaces"], ","), strings.Split(flags["--watch-namespaces"], ","))
	if err != nil {
		t.Fatal(err)
	}
	kinds := workload.Builtin()
	if rollouts {
		kinds = append(kinds, workload.Rollout)
	}
	svc := admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
		Namespace: releaseNS, Name: "configstamp", Port: new(int32(443))}}
	reg := webhook.Registration(svc, sc, kinds)
	if !equality.Semantic.DeepEqual(mwc.Webhooks, reg.Webhooks) {
		t.Errorf("chart registers\n%+v\nconfigstamp registers\n%+v", mwc.Webhooks, reg.Webhooks)
	}
	for _, w := range mwc.Webhooks {
		sel := w.NamespaceSelector
		if w.ObjectSelector != nil && len(w.ObjectSelector.MatchLabels) > 0 || len(sel.MatchLabels) > 0 || len(sel.MatchExpressions) != 1 ||
			sel.MatchExpressions[0].Operator != metav1.LabelSelectorOpIn || !slices.Equal(sel.MatchExpressions[0].Values, []string{"a", "b"}) {
			t.Errorf("entry %s selects %+v / %+v, want kubernetes.io/metadata.name In [a b] alone", w.Name, sel, w.ObjectSelector)
		}
	}
}

// TestNamespacedInstallWorksUnderItsRoles installs the chart with watchNamespaces with
// the real helm, then runs configstamp's two roles out of cluster, each with a token of
// its ServiceAccount (the webhook's configstamp-webhook, the watcher's configstamp; bound
// by the chart's Roles and nothing cluster-wide) and the flags the chart renders: its start-up permission check passes, and
// namespaced.Install.Check holds (stamps and re-stamps in a watched namespace without
// an opt-in label, nothing in one not watched though opted in, no request outside its
// namespaces in the audit log).
func TestNamespacedInstallWorksUnderItsRoles(t *testing.T) {
	watched := env.NewNamespace(t, false)
	other := env.NewNamespace(t, true)
	env.CreateNamespace(t, framework.ProbeNamespace, true)
	values := []string{"--set-json", fmt.Sprintf(`watchNamespaces=[%q,%q]`, watched, framework.ProbeNamespace)}
	installChart(t, values...)
	t.Cleanup(func() {
		_, _ = toolErr("helm", "uninstall", "configstamp", "--namespace", releaseNS, "--ignore-not-found", "--wait")
	})
	if out := tool(t, "kubectl", "get", "clusterroles,clusterrolebindings", "-l", "app.kubernetes.io/instance=configstamp", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Fatalf("a namespaced install created %s", out)
	}
	flags := processFlags(t, render(t, values...))
	certDir := t.TempDir()
	ca, err := certs.WriteSelfSigned(certDir, "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	// The caBundle as cert-manager's CA injector would set it.
	port, kubeconfig := repoint(t, ca)
	install := namespaced.Install{Env: env, User: "system:serviceaccount:" + releaseNS + ":configstamp", Own: releaseNS,
		WebhookUser: "system:serviceaccount:" + releaseNS + ":configstamp-webhook",
		Coverage:    "configstamp-coverage", Watched: strings.Split(flags["--watch-namespaces"], ","), Mark: namespaced.AuditMark(t, env)}
	common := []string{"--watch-namespaces=" + flags["--watch-namespaces"], "--coverage-configmap=" + flags["--coverage-configmap"],
		"--exclude-namespaces=" + flags["--exclude-namespaces"], "--namespace-label=" + flags["--namespace-label"], "--hash-key=" + flags["--hash-key"]}
	// The two roles as the chart runs them, each as its own ServiceAccount.
	install.Webhook = env.Start(t, framework.Options{
		Kubeconfig: env.ServiceAccountKubeconfig(t, releaseNS, "configstamp-webhook"), SkipRegistration: true, WebhookPort: port,
		Args: append([]string{"--role=" + flags["--role"], "--webhook-cert-dir", certDir, "--watcher-user=" + flags["--watcher-user"]}, common...),
	})
	install.Configstamp = env.Start(t, framework.Options{Kubeconfig: kubeconfig, NoWebhook: true,
		Args: append([]string{"--role=watcher", "--leader-elect", "--leader-election-namespace", releaseNS, "--debounce", "500ms"}, common...)})
	install.Check(t, watched, other)
}
