package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/certs"
	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/namespaced"
	"github.com/configstamp/configstamp/webhook"
)

// watchedRules are a namespaced install's grants in each watched namespace (the chart's
// Roles; test/deploy checks those against the chart itself).
var watchedRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"apps"}, Resources: []string{"deployments", "statefulsets", "daemonsets"}, Verbs: []string{"get", "list", "watch", "patch"}},
	{APIGroups: []string{"apps"}, Resources: []string{"replicasets", "controllerrevisions"}, Verbs: []string{"list"}},
	{APIGroups: []string{"batch"}, Resources: []string{"cronjobs"}, Verbs: []string{"get", "list", "watch", "patch"}},
	{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
}

// TestNamespacedInstall runs configstamp with --watch-namespaces as a ServiceAccount
// bound by Roles alone (no ClusterRole of its own), with a registration for the watched
// namespaces installed by the admin: it starts (its permission check passes), and
// namespaced.Install.Check holds. Restarted with one more namespace in the list, it
// rolls nothing there: an unstamped workload that predates the namespace's addition
// was installed over, not missed.
func TestNamespacedInstall(t *testing.T) {
	own := env.NewNamespace(t, false)
	watched := env.NewNamespace(t, false)
	other := env.NewNamespace(t, true)
	added := env.NewNamespace(t, false)
	env.CreateNamespace(t, framework.ProbeNamespace, true)
	list := []string{watched, framework.ProbeNamespace}

	bind := func(ns string, rules []rbacv1.PolicyRule) {
		create(t, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "configstamp"}, Rules: rules})
		create(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "configstamp"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "configstamp"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: own, Name: "configstamp"}}})
		t.Cleanup(func() { // the probe namespace outlives the test
			_ = k8s.Delete(bg, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "configstamp"}})
			_ = k8s.Delete(bg, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "configstamp"}})
		})
	}
	for _, ns := range list {
		bind(ns, watchedRules)
	}
	bind(own, []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"configstamp-watcher"}, Verbs: []string{"get", "update"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"configstamp-coverage"}, Verbs: []string{"get", "patch"}},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"configstamp-hash-key"}, Verbs: []string{"get", "update"}},
	})
	create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: own, Name: "configstamp-coverage"}})
	// The hash key Secret, empty, as the chart creates it: configstamp fills it.
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: own, Name: "configstamp-hash-key"}})
	create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: own, Name: "configstamp"}})
	kubeconfig := env.ServiceAccountKubeconfig(t, own, "configstamp")

	// The registration, as the chart's admin installs it.
	certDir := t.TempDir()
	ca, err := certs.WriteSelfSigned(certDir, "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := scope.NewWatched("configstamp.io/inject", scope.DefaultExcluded, list)
	if err != nil {
		t.Fatal(err)
	}
	base := admissionregistrationv1.WebhookClientConfig{URL: new(fmt.Sprintf("https://127.0.0.1:%d", port)), CABundle: ca}
	reg := webhook.Registration(base, sc, workload.Builtin())
	reg.Name = own
	create(t, reg)
	t.Cleanup(func() { _ = k8s.Delete(bg, reg) })

	install := namespaced.Install{Env: env, User: "system:serviceaccount:" + own + ":configstamp", Own: own,
		Coverage: "configstamp-coverage", Watched: list, Mark: namespaced.AuditMark(t, env)}
	install.Configstamp = env.Start(t, framework.Options{
		Kubeconfig: kubeconfig, SkipRegistration: true, WebhookPort: port,
		Args: []string{"--webhook-cert-dir", certDir, "--leader-elect", "--leader-election-namespace", own, "--debounce", "500ms",
			"--watch-namespaces=" + watched + "," + framework.ProbeNamespace, "--coverage-configmap=" + own + "/configstamp-coverage",
			"--hash-key=" + own + "/configstamp-hash-key"},
	})
	// Created once configstamp covers Deployments, in a namespace it does not watch yet.
	create(t, configMap(added, "cfg", map[string]string{"k": "1"}))
	before := createDeployment(t, added, "app", corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1",
		EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}}})
	install.Check(t, watched, other)

	// The same install, one namespace more (its Role, the registration's selector).
	bind(added, watchedRules)
	list = append(list, added)
	sc, err = scope.NewWatched("configstamp.io/inject", scope.DefaultExcluded, list)
	if err != nil {
		t.Fatal(err)
	}
	if err := k8s.Get(bg, client.ObjectKeyFromObject(reg), reg); err != nil {
		t.Fatal(err)
	}
	reg.Webhooks = webhook.Registration(base, sc, workload.Builtin()).Webhooks
	if err := k8s.Update(bg, reg); err != nil {
		t.Fatal(err)
	}
	env.Start(t, framework.Options{
		Kubeconfig: kubeconfig, SkipRegistration: true, WebhookPort: port,
		Args: []string{"--webhook-cert-dir", certDir, "--leader-elect", "--leader-election-namespace", own, "--debounce", "500ms",
			"--watch-namespaces=" + strings.Join(list, ","), "--coverage-configmap=" + own + "/configstamp-coverage",
			"--hash-key=" + own + "/configstamp-hash-key"},
	})
	framework.Eventually(t, 30*time.Second, "the added namespace's coverage", func() error {
		var cm corev1.ConfigMap
		if err := k8s.Get(bg, client.ObjectKey{Namespace: own, Name: "configstamp-coverage"}, &cm); err != nil {
			return err
		}
		if v := cm.Annotations[stamp.CoverageAnnotation]; !strings.Contains(v, "namespace/"+added) {
			return fmt.Errorf("coverage %s", v)
		}
		return nil
	})
	framework.Consistently(t, 5*time.Second, "nothing rolled in the added namespace", func() error {
		var d appsv1.Deployment
		if err := k8s.Get(bg, client.ObjectKeyFromObject(before), &d); err != nil {
			return err
		}
		// A record of the config its pods run may be written (metadata); the pod
		// template stays as it was.
		if !equality.Semantic.DeepEqual(d.Spec.Template, before.Spec.Template) {
			return fmt.Errorf("pod template changed: annotations %v", d.Spec.Template.Annotations)
		}
		return nil
	})
}
