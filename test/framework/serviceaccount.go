package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// ServiceAccountKubeconfig writes a kubeconfig with an hour's token of the
// ServiceAccount ns/name (TokenRequest), to run configstamp with exactly its grants.
func (e *Env) ServiceAccountKubeconfig(t testing.TB, ns, name string) string {
	t.Helper()
	path, err := e.WriteServiceAccountKubeconfig(context.Background(), ns, name, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// WriteServiceAccountKubeconfig writes into dir a kubeconfig with an hour's token of the
// ServiceAccount ns/name (TokenRequest) and returns its path.
func (e *Env) WriteServiceAccountKubeconfig(ctx context.Context, ns, name, dir string) (string, error) {
	cs, err := kubernetes.NewForConfig(e.Cluster.Config)
	if err != nil {
		return "", err
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "sa.kubeconfig")
	return path, os.WriteFile(path, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: sa, user: {token: %q}}]
contexts: [{name: c, context: {cluster: c, user: sa}}]
current-context: c
`, e.Cluster.URL, filepath.Join(e.Cluster.Dir, "pki", "ca.crt"), tr.Status.Token)), 0o600)
}
