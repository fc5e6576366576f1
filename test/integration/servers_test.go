package integration

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/framework"
)

// TestShutdownDelay: after SIGTERM, configstamp reports not ready at once and goes on
// serving admission for --shutdown-delay, then exits cleanly.
func TestShutdownDelay(t *testing.T) {
	probe := freeAddr(t)
	p := env.Start(t, framework.Options{Args: []string{"--shutdown-delay", "6s", "--health-probe-bind-address", probe}})
	ready := func() (int, error) {
		resp, err := http.Get("http://" + probe + "/readyz")
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := ready(); err != nil || code != http.StatusOK {
		t.Fatalf("readyz before SIGTERM: %d %v, want 200", code, err)
	}
	p.Signal()
	signalled := time.Now()
	framework.Eventually(t, 3*time.Second, "not ready after SIGTERM", func() error {
		if code, err := ready(); err != nil || code == http.StatusOK {
			return fmt.Errorf("readyz %d %v", code, err)
		}
		return nil
	})
	// Still serving admission: a dry-run create is stamped (the process is alive).
	d := framework.ProbeDeployment()
	if err := k8s.Create(bg, d, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	if hashOf(d) == "" {
		t.Error("not stamped during the shutdown delay")
	}
	if !p.Alive() {
		t.Fatal("exited before the end of the shutdown delay")
	}
	select {
	case <-p.Exited():
	case <-time.After(30 * time.Second):
		t.Fatal("still running 30s after SIGTERM")
	}
	// A lower bound, not a timing measurement: it did wait out the delay.
	if took := time.Since(signalled); took < 5*time.Second {
		t.Errorf("exited %v after SIGTERM, before the 6s shutdown delay", took.Round(time.Millisecond))
	}
	if code := p.ExitCode(); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
}

// TestMetricsAuthentication: with --metrics-secure, /metrics is served over TLS to a
// token allowed to get /metrics, and refused without a token (401) or with a token that
// is not allowed (403).
func TestMetricsAuthentication(t *testing.T) {
	addr := freeAddr(t)
	env.Start(t, framework.Options{Args: []string{"--metrics-secure", "--metrics-bind-address", addr}})

	ns := env.NewNamespace(t, false)
	cs, err := kubernetes.NewForConfig(env.Cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	token := func(sa string) string {
		create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}})
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(bg, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	reader := ns + "-metrics-reader"
	create(t, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: reader},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}})
	create(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: reader},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "scraper"}}})
	t.Cleanup(func() {
		_ = k8s.Delete(bg, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: reader}})
		_ = k8s.Delete(bg, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: reader}})
	})
	allowed, denied := token("scraper"), token("nobody")

	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // configstamp's own self-generated certificate
	get := func(tok string) (int, string, error) {
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	// RBAC takes effect through the API server's informers: allow a moment.
	framework.Eventually(t, 20*time.Second, "metrics served to a permitted token", func() error {
		code, body, err := get(allowed)
		if err != nil || code != http.StatusOK || !strings.Contains(body, "configstamp_build_info") {
			return fmt.Errorf("status %d, error %v, build info present %v", code, err, strings.Contains(body, "configstamp_build_info"))
		}
		return nil
	})
	for _, c := range []struct {
		what, token string
		want        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a token without the grant", denied, http.StatusForbidden},
		{"a bogus token", "bogus", http.StatusUnauthorized},
	} {
		code, body, err := get(c.token)
		if err != nil || code != c.want {
			t.Errorf("%s: status %d (%v), want %d", c.what, code, err, c.want)
		}
		if strings.Contains(body, "configstamp_") {
			t.Errorf("%s: metrics served", c.what)
		}
	}
	// No HTTP/2 offered (as on the webhook server).
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}}) //nolint:gosec // only the handshake is checked
	if err != nil {
		t.Fatal(err)
	}
	if p := conn.ConnectionState().NegotiatedProtocol; p == "h2" {
		t.Error("the metrics server offers HTTP/2")
	}
	conn.Close()
	// Plain HTTP is not served.
	if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("metrics served over plain HTTP")
		}
	}
}
