package integration

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net/http"
	"testing"
	"time"

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
