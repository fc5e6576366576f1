package certs

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// issued is what cert-manager's CA issuer writes: a serving certificate, its key, and
// the CA that signed it.
func issued(t *testing.T, ca *x509.Certificate, key crypto.Signer, at time.Time) map[string][]byte {
	t.Helper()
	certPEM, keyPEM, err := newServing(at, 10*time.Hour, ca, key, []string{"h"})
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{CertName: certPEM, KeyName: keyPEM, CAName: pemCert(ca)}
}

func TestFollowerPublishesBeforeServing(t *testing.T) {
	ctx := context.Background()
	ca1, key1, _ := newCA(t0, 30*time.Hour)
	ca2, key2, _ := newCA(t0.Add(20*time.Hour), 30*time.Hour)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "tls"}, Type: corev1.SecretTypeTLS, Data: issued(t, ca1, key1, t0)}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(secret, registration()).Build()
	now := t0
	f := &Follower{Publisher: Publisher{Client: c, Registration: "configstamp", CASwitchDelay: time.Minute, now: func() time.Time { return now }},
		Secret: types.NamespacedName{Namespace: "ns", Name: "tls"}, CertDir: t.TempDir()}
	served := func() []byte {
		b, _ := os.ReadFile(filepath.Join(f.CertDir, CertName))
		return b
	}
	bundle := func() []*x509.Certificate {
		var reg admissionregistrationv1.MutatingWebhookConfiguration
		_ = c.Get(ctx, client.ObjectKey{Name: "configstamp"}, &reg)
		for _, w := range reg.Webhooks[1:] {
			if !bytes.Equal(w.ClientConfig.CABundle, reg.Webhooks[0].ClientConfig.CABundle) {
				t.Fatal("entries trust different bundles")
			}
		}
		return parseCerts(reg.Webhooks[0].ClientConfig.CABundle)
	}
	setSecret := func(data map[string][]byte) {
		_ = c.Get(ctx, f.Secret, secret)
		secret.Data = data
		if err := c.Update(ctx, secret); err != nil {
			t.Fatal(err)
		}
	}

	// Nothing served yet: served at once, the CA published.
	if _, err := f.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(served(), secret.Data[CertName]) {
		t.Fatal("first certificate not served")
	}
	if b := bundle(); len(b) != 1 || !b[0].Equal(ca1) {
		t.Fatalf("bundle of %d, want CA 1", len(b))
	}

	// A renewal from the same CA: served at once.
	now = t0.Add(15 * time.Hour)
	renewed := issued(t, ca1, key1, now) // to t0+25h
	setSecret(renewed)
	if _, err := f.Ensure(ctx); err != nil || !bytes.Equal(served(), renewed[CertName]) {
		t.Fatalf("renewal from the same CA not served at once (%v)", err)
	}

	// A certificate from a new CA: published (the old CA kept), served only after the
	// switch delay.
	now = t0.Add(20 * time.Hour)
	fromNew := issued(t, ca2, key2, now)
	setSecret(fromNew)
	next, err := f.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(served(), renewed[CertName]) {
		t.Fatal("a certificate from a CA the registration had just learned was served at once")
	}
	if b := bundle(); len(b) != 2 || !contains(b, ca1) || !contains(b, ca2) {
		t.Fatalf("bundle of %d, want both CAs", len(b))
	}
	if !next.Equal(now.Add(time.Minute)) {
		t.Fatalf("next look at %v, want after the switch delay", next)
	}
	now = now.Add(59 * time.Second)
	if _, err := f.Ensure(ctx); err != nil || !bytes.Equal(served(), renewed[CertName]) {
		t.Fatal("switched before the delay")
	}
	now = now.Add(2 * time.Second)
	if _, err := f.Ensure(ctx); err != nil || !bytes.Equal(served(), fromNew[CertName]) {
		t.Fatalf("not switched after the delay (%v)", err)
	}

	// The old CA expires: it leaves the bundle.
	now = t0.Add(30*time.Hour + time.Second)
	if _, err := f.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if b := bundle(); len(b) != 1 || !b[0].Equal(ca2) {
		t.Fatalf("bundle of %d after CA 1 expired, want CA 2 alone", len(b))
	}

	// No ca.crt: a clear error, nothing changed.
	setSecret(map[string][]byte{CertName: fromNew[CertName], KeyName: fromNew[KeyName]})
	if _, err := f.Ensure(ctx); err == nil || !strings.Contains(err.Error(), "no CA in ca.crt") {
		t.Fatalf("Secret without ca.crt: %v", err)
	}
}

// TestFollowerServesNewCAWhenCurrentEnds: the served certificate about to end is
// replaced even within the switch delay.
func TestFollowerServesNewCAWhenCurrentEnds(t *testing.T) {
	ctx := context.Background()
	ca1, key1, _ := newCA(t0, 30*time.Hour)
	ca2, key2, _ := newCA(t0, 30*time.Hour)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "tls"}, Data: issued(t, ca1, key1, t0)}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(secret, registration()).Build()
	now := t0
	f := &Follower{Publisher: Publisher{Client: c, Registration: "configstamp", CASwitchDelay: time.Hour, now: func() time.Time { return now }},
		Secret: types.NamespacedName{Namespace: "ns", Name: "tls"}, CertDir: t.TempDir()}
	if _, err := f.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	now = t0.Add(9*time.Hour + 30*time.Minute) // the served one ends at t0+10h
	secret.Data = issued(t, ca2, key2, now)
	if err := c.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.CertDir, CertName)); !bytes.Equal(b, secret.Data[CertName]) {
		t.Fatal("kept a certificate 30 minutes from its end for a switch delay of an hour")
	}
}
