package integration

import (
	"bytes"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/webhook"
)

// TestWebhookClientCertificate: with --webhook-client-ca-file, the API server's
// admissions are stamped (it presents a certificate that CA signed, as its admission
// configuration says: env.Start waits for a stamped dry run), and a review posted
// straight to the port is refused in the TLS handshake, without a client certificate
// or with one another CA signed.
func TestWebhookClientCertificate(t *testing.T) {
	cs := env.Start(t, framework.Options{Args: []string{"--webhook-client-ca-file", env.Cluster.WebhookClientCA}})

	other, otherKey, err := cluster.NewCA("other-ca")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := cluster.SignClient(other, otherKey, "kube-apiserver-webhook-client")
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("https://127.0.0.1:%d%s", cs.WebhookPort, webhook.Path)
	for _, c := range []struct {
		what string
		cert *tls.Certificate
	}{{"no client certificate", &tls.Certificate{}}, {"a client certificate of another CA", &foreign}} {
		// Sent whatever CAs the server names (Go's client would otherwise keep back a
		// certificate of a CA the server does not ask for).
		send := func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return c.cert, nil }
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, GetClientCertificate: send}}} //nolint:gosec // the server's certificate is not what is checked
		resp, err := hc.Post(url, "application/json", bytes.NewReader([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`)))
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: answered %s, want the handshake refused", c.what, resp.Status)
			continue
		}
		t.Logf("%s: %v", c.what, err)
	}
}

// TestWebhookClientCARotation: --webhook-client-ca-file is watched. Rewritten to hold
// another CA, a handshake presenting the API server's own client certificate is refused
// and one from the new CA accepted; rewritten back, the reverse; all without a restart.
// Each handshake is a new connection: one made before a rotation is not checked again
// (as with the API server's own --client-ca-file).
func TestWebhookClientCARotation(t *testing.T) {
	caFile := filepath.Join(t.TempDir(), "client-ca.crt")
	apiServerCA, err := os.ReadFile(env.Cluster.WebhookClientCA)
	if err != nil {
		t.Fatal(err)
	}
	rotate := func(pemCA []byte) {
		t.Helper()
		// As a kubelet updates a mounted Secret: a new file renamed into place.
		if err := os.WriteFile(caFile+".tmp", pemCA, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(caFile+".tmp", caFile); err != nil {
			t.Fatal(err)
		}
	}
	rotate(apiServerCA)
	cs := env.Start(t, framework.Options{Args: []string{"--webhook-client-ca-file", caFile}})

	// The certificate the API server presents (its admission configuration's).
	pki := filepath.Dir(env.Cluster.WebhookClientCA)
	apiServer, err := tls.LoadX509KeyPair(filepath.Join(pki, "webhook-client.crt"), filepath.Join(pki, "webhook-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	newCA, newKey, err := cluster.NewCA("rotated-ca")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := cluster.SignClient(newCA, newKey, "kube-apiserver-webhook-client")
	if err != nil {
		t.Fatal(err)
	}
	fromNew, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("https://127.0.0.1:%d%s", cs.WebhookPort, webhook.Path)
	handshake := func(cert *tls.Certificate) error {
		send := func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, GetClientCertificate: send}}} //nolint:gosec // the server's certificate is not what is checked
		resp, err := hc.Post(url, "application/json", bytes.NewReader([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`)))
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	trusts := func(accepted, refused *tls.Certificate) func() error {
		return func() error {
			if err := handshake(accepted); err != nil {
				return fmt.Errorf("refused a certificate of the CA in the file: %w", err)
			}
			if handshake(refused) == nil {
				return errors.New("accepted a certificate of the CA no longer in the file")
			}
			return nil
		}
	}
	if err := trusts(&apiServer, &fromNew)(); err != nil {
		t.Fatalf("before the rotation: %v", err)
	}
	rotate(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: newCA.Raw}))
	framework.Eventually(t, 2*time.Minute, "the rotated CA trusted, the API server's refused", trusts(&fromNew, &apiServer))
	rotate(apiServerCA)
	framework.Eventually(t, 2*time.Minute, "the API server's CA trusted again, the other refused", trusts(&apiServer, &fromNew))
	// And the API server's own call goes through.
	framework.Eventually(t, time.Minute, "a dry-run create through the API server stamped", func() error {
		d := framework.ProbeDeployment()
		if err := k8s.Create(bg, d, client.DryRunAll); err != nil {
			return err
		}
		if d.Spec.Template.Annotations[stamp.HashAnnotation] == "" {
			return errors.New("not stamped")
		}
		return nil
	})
	if !cs.Alive() {
		t.Fatal("configstamp exited")
	}
}
