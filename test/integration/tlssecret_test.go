package integration

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/certs"
	"github.com/configstamp/configstamp/test/framework"
)

// testCA is a CA as cert-manager's CA issuer holds one.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return testCA{cert, key}
}

// issue is the Secret data cert-manager writes: tls.crt, tls.key, and ca.crt, the CA.
func (ca testCA) issue(t *testing.T) map[string][]byte {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "configstamp"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	return map[string][]byte{
		certs.CertName: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		certs.KeyName:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		certs.CAName:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}),
	}
}

// TestTLSSecretMode plays cert-manager: configstamp (--tls-secret) serves the
// certificate of the Secret and keeps the registration's caBundle trusting it; a
// renewal from the same CA is served within seconds; a certificate from a new CA is
// served only after its CA is in the bundle (the old one kept), with no handshake
// refused and no admission unstamped at any point; a wiped caBundle comes back.
func TestTLSSecretMode(t *testing.T) {
	const ns = "configstamp-tls-secret"
	port := freePort(t)
	reg := selfSignedSetup(t, ns, port)
	ca1 := newTestCA(t, "ca-1")
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "configstamp-cert-manager-tls"}, Type: corev1.SecretTypeTLS, Data: ca1.issue(t)}
	_ = k8s.Delete(bg, secret) // a previous run's
	create(t, secret)
	t.Cleanup(func() { _ = k8s.Delete(bg, secret) })
	probes := freeAddr(t)
	// With the probe address on, as in the chart (the first certificate is awaited
	// before the manager takes the address).
	p := env.Start(t, framework.Options{SkipRegistration: true, WebhookPort: port, Args: []string{
		"--tls-secret", ns + "/" + secret.Name, "--webhook-cert-dir", t.TempDir(), "--ca-switch-delay", "3s",
		"--health-probe-bind-address", probes}})
	framework.Eventually(t, 10*time.Second, "ready", func() error {
		resp, err := http.Get("http://" + probes + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz %d", resp.StatusCode)
		}
		return nil
	})
	served := func() *x509.Certificate {
		bundle, _ := bundleOf(t, reg.Name)
		leaf, err := handshake(p.WebhookPort, bundle)
		if err != nil {
			return nil
		}
		return leaf
	}
	is := func(want map[string][]byte) func() error {
		b, _ := pem.Decode(want[certs.CertName])
		return func() error {
			if leaf := served(); leaf == nil || !bytes.Equal(leaf.Raw, b.Bytes) {
				return fmt.Errorf("not serving the Secret's certificate yet")
			}
			return nil
		}
	}
	framework.Eventually(t, 10*time.Second, "serving the Secret's certificate", is(secret.Data))
	m := monitorTrust(t, reg.Name, port)
	update := func(data map[string][]byte) {
		if err := k8s.Get(bg, client.ObjectKeyFromObject(secret), secret); err != nil {
			t.Fatal(err)
		}
		secret.Data = data
		if err := k8s.Update(bg, secret); err != nil {
			t.Fatal(err)
		}
	}

	renewed := ca1.issue(t)
	update(renewed)
	framework.Eventually(t, 10*time.Second, "renewal from the same CA served", is(renewed))

	ca2 := newTestCA(t, "ca-2")
	fromNew := ca2.issue(t)
	update(fromNew)
	framework.Eventually(t, 20*time.Second, "certificate from the new CA served", is(fromNew))
	bundle, same := bundleOf(t, reg.Name)
	if got := mustParse(bundle); !same || len(got) != 2 {
		t.Errorf("bundle of %d CAs (every entry alike: %v), want the new and the old", len(got), same)
	}
	time.Sleep(2 * time.Second)
	m.stop(t, 2*time.Second) // the switch delay is 3 s; the monitor looks every 100 ms
	if n := m.issuerCount(); n != 2 {
		t.Errorf("served certificates of %d CAs, want 2", n)
	}

	wipeBundle(t, reg.Name)
	framework.Eventually(t, 10*time.Second, "caBundle put back", func() error {
		if b, same := bundleOf(t, reg.Name); !same || len(mustParse(b)) == 0 {
			return fmt.Errorf("caBundle not back yet")
		}
		return nil
	})
}
