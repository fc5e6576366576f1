package integration

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/certs"
	"github.com/configstamp/configstamp/test/framework"
)

// TestSelfSignedModeRotates runs the self-signed certificate mode with a short
// validity: configstamp issues the certificate into its Secret, fills the registration's
// caBundle, renews the certificate, and admission keeps working across renewals.
func TestSelfSignedModeRotates(t *testing.T) {
	const ns = "configstamp-selfsigned"
	port := freePort(t)
	reg := selfSignedSetup(t, ns, port)
	p := env.Start(t, framework.Options{SkipRegistration: true, WebhookPort: port, Args: selfSignedArgs(ns,
		"--webhook-cert-dir", t.TempDir(),
		"--self-signed-validity", "40s", "--self-signed-renew-before", "30s", "--self-signed-ca-validity", "1h",
	)})

	secretSerial := func() (string, []byte) {
		var s corev1.Secret
		if err := k8s.Get(bg, client.ObjectKey{Namespace: ns, Name: "configstamp-webhook-tls"}, &s); err != nil {
			t.Fatal(err)
		}
		b, _ := pem.Decode(s.Data[certs.CertName])
		if b == nil {
			t.Fatal("secret holds no certificate")
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c.SerialNumber.String(), s.Data[certs.CAName]
	}
	first, ca := secretSerial()
	var got admissionregistrationv1.MutatingWebhookConfiguration
	if err := k8s.Get(bg, client.ObjectKeyFromObject(reg), &got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Webhooks[0].ClientConfig.CABundle, ca) {
		t.Fatal("registration's caBundle is not the Secret's CA")
	}
	if served, err := servingSerial(p.WebhookPort); err != nil || served != first {
		t.Fatalf("serving %s (%v), want the Secret's certificate %s", served, err, first)
	}

	// Renewed every ~10s: twice, and admission works after each.
	seen := map[string]bool{first: true}
	for len(seen) < 3 {
		framework.Eventually(t, 40*time.Second, "certificate renewed", func() error {
			serial, _ := secretSerial()
			if seen[serial] {
				return fmt.Errorf("still %s", serial)
			}
			served, err := servingSerial(p.WebhookPort)
			if err != nil || served != serial {
				return fmt.Errorf("Secret has %s, server presents %s (%v)", serial, served, err)
			}
			seen[serial] = true
			return nil
		})
		framework.Eventually(t, 20*time.Second, "admission after renewal", func() error {
			d := framework.ProbeDeployment()
			if err := k8s.Create(bg, d, client.DryRunAll); err != nil {
				return err
			}
			if hashOf(d) == "" {
				return fmt.Errorf("not stamped")
			}
			return nil
		})
	}
}
