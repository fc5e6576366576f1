package framework

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Identity makes a kubeconfig of a new service account allowed rules (none: no RBAC)
// in every namespace: a user of the command-line tools with exactly those rights.
func (e *Env) Identity(t *testing.T, rules ...rbacv1.PolicyRule) string {
	t.Helper()
	ctx := context.Background()
	ns := e.NewNamespace(t, false)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nobody"}}
	if err := e.Client.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	if len(rules) > 0 {
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "cli-" + ns}, Rules: rules}
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name}},
		}
		for _, o := range []client.Object{role, binding} {
			if err := e.Client.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	return e.ServiceAccountKubeconfig(t, ns, sa.Name)
}
