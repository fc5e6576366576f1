package precision

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

// identity is a ServiceAccount configstamp runs as, with a ClusterRole the test can
// change while it runs.
type identity struct {
	role       *rbacv1.ClusterRole
	kubeconfig string
	user       string
}

// configstampRules are what configstamp needs in dev mode: the chart's rules, plus
// creating and updating its own registration.
func configstampRules(configMapVerbs ...string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: configMapVerbs},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments", "statefulsets", "daemonsets"}, Verbs: []string{"get", "list", "watch", "patch"}},
		{APIGroups: []string{"apps"}, Resources: []string{"replicasets", "controllerrevisions"}, Verbs: []string{"list"}},
		{APIGroups: []string{"batch"}, Resources: []string{"cronjobs"}, Verbs: []string{"get", "list", "watch", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"}, Verbs: []string{"get", "create", "update", "patch", "delete"}},
		// The framework's hash key Secret (framework.HashKeyRef).
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{framework.HashKeyName}, Verbs: []string{"get", "update"}},
	}
}

func newIdentity(t *testing.T) *identity {
	ns := env.NewNamespace(t, false)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "configstamp"}}
	id := &identity{
		role: &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "configstamp-" + ns}, Rules: configstampRules("get", "list", "watch")},
		user: "system:serviceaccount:" + ns + ":configstamp",
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: id.role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: id.role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name}},
	}
	if err := env.Client.Create(bg, sa); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(bg, id.role); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(bg, binding); err != nil {
		t.Fatal(err)
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if err := env.Client.SubResource("token").Create(bg, sa, tr); err != nil {
		t.Fatal(err)
	}
	id.kubeconfig = filepath.Join(t.TempDir(), "sa.kubeconfig")
	caFile := filepath.Join(env.Cluster.Dir, "pki", "ca.crt")
	if err := os.WriteFile(id.kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: sa, user: {token: %q}}]
contexts: [{name: c, context: {cluster: c, user: sa}}]
current-context: c
`, env.Cluster.URL, caFile, tr.Status.Token)), 0o600); err != nil {
		t.Fatal(err)
	}
	return id
}

// setConfigMapVerbs changes what the identity may do with ConfigMaps and waits until
// the API server's authorizer agrees.
func (id *identity) setConfigMapVerbs(t *testing.T, ns string, verbs ...string) {
	t.Helper()
	id.role.Rules = configstampRules(verbs...)
	if err := env.Client.Update(bg, id.role); err != nil {
		t.Fatal(err)
	}
	want := strings.Contains(strings.Join(verbs, ","), "get")
	framework.Eventually(t, 30*time.Second, "authorizer sees the role change", func() error {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: id.user,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Resource: "configmaps"}}}
		if err := env.Client.Create(bg, sar); err != nil {
			return err
		}
		if sar.Status.Allowed != want {
			return fmt.Errorf("get configmaps allowed %v, want %v", sar.Status.Allowed, want)
		}
		return nil
	})
}

const replacedManifest = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
spec:
  replicas: 2
  selector:
    matchLabels: {app: app}
  template:
    metadata:
      labels: {app: app}
    spec:
      containers:
      - name: app
        image: registry.example/app:2
        volumeMounts:
        - {name: cfg, mountPath: /etc/cfg}
      volumes:
      - name: cfg
        configMap: {name: cfg}
`

// TestReplaceWhileReadsFail: kubectl replace (a manifest without the stamp) while
// configstamp cannot read ConfigMaps (its RBAC revoked, for real) keeps the stored
// stamp, with a warning, instead of dropping it; once reads work again the watcher rolls
// the change made meanwhile, once.
func TestReplaceWhileReadsFail(t *testing.T) {
	id := newIdentity(t)
	env.Start(t, framework.Options{Kubeconfig: id.kubeconfig})
	ns := env.NewNamespace(t, true)
	c := volume(nil, false)
	createConfigMap(t, ns, "cfg", map[string]string{"k": "1"})
	createDeployment(t, ns, "app", "cfg", c)
	first := rollouts(t, ns, "app", 1)
	stored := first.Spec.Template.Annotations[stamp.HashAnnotation]
	if stored != docHash(t, ns, "cfg", c) {
		t.Fatalf("created with hash %q, want %q", stored, docHash(t, ns, "cfg", c))
	}

	id.setConfigMapVerbs(t, ns, "list", "watch")
	setData(t, ns, "cfg", "k", "2")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "app.yaml"), []byte(replacedManifest), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := env.Command(dir, nil, "kubectl", "--namespace", ns, "replace", "-f", "app.yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl replace: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "keeps its stored config hash") {
		t.Errorf("kubectl replace showed no warning:\n%s", out)
	}
	replaced := rollouts(t, ns, "app", 2) // the image change rolls, with the stored stamp
	if got := replaced.Spec.Template.Annotations[stamp.HashAnnotation]; got != stored {
		t.Fatalf("after replace: hash %q, want the stored %q", got, stored)
	}

	id.setConfigMapVerbs(t, ns, "get", "list", "watch")
	framework.Eventually(t, time.Minute, "healed stamp", func() error {
		if got, want := env.Deployment(t, ns, "app").Spec.Template.Annotations[stamp.HashAnnotation], docHash(t, ns, "cfg", c); got != want {
			return fmt.Errorf("hash %q, want %q", got, want)
		}
		return nil
	})
	rollouts(t, ns, "app", 3)
}

// TestMissingPermissionsStopStart: run under an identity that may not watch StatefulSets
// (RBAC from an older chart, or tightened by hand), configstamp does not start: it exits
// naming what it lacks, rather than serve admission beside a watcher whose caches never
// sync.
func TestMissingPermissionsStopStart(t *testing.T) {
	id := newIdentity(t)
	rules := configstampRules("get", "list", "watch")
	rules[1].Resources = []string{"deployments", "daemonsets"}
	id.role.Rules = rules
	if err := env.Client.Update(bg, id.role); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 2*time.Minute)
	defer cancel()
	p, err := env.Run(ctx, framework.Options{Kubeconfig: id.kubeconfig})
	if err == nil {
		p.Stop()
		t.Fatal("configstamp started without permission to watch StatefulSets")
	}
	for _, want := range []string{"configstamp exited", "may not", "list statefulsets.apps", "watch statefulsets.apps", "patch statefulsets.apps"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("start-up error does not say %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "daemonsets.apps") {
		t.Fatalf("start-up error names a permission it has:\n%v", err)
	}
}
