package certs

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
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

	// The old CA expires (and cert-manager has renewed from the new one): it leaves the
	// bundle.
	now = t0.Add(30*time.Hour + time.Second)
	setSecret(issued(t, ca2, key2, t0.Add(28*time.Hour)))
	if _, err := f.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if b := bundle(); len(b) != 1 || !b[0].Equal(ca2) {
		t.Fatalf("bundle of %d after CA 1 expired, want CA 2 alone", len(b))
	}

	// No ca.crt: a clear error, nothing changed.
	setSecret(map[string][]byte{CertName: fromNew[CertName], KeyName: fromNew[KeyName]})
	if _, err := f.Ensure(ctx); err == nil || !strings.Contains(err.Error(), "does not verify against a CA of ca.crt") {
		t.Fatalf("Secret without ca.crt: %v", err)
	}
}

// TestFollowerNewPodWaitsForNewCA: a replica starting with nothing served, whose
// Secret holds a certificate from a CA it has just added next to the CA API servers
// use, does not serve it before the switch delay (the other replicas wait too); into an
// empty bundle (an install) it serves at once.
func TestFollowerNewPodWaitsForNewCA(t *testing.T) {
	ctx := context.Background()
	ca0, _, _ := newCA(t0, 30*time.Hour)
	ca1, key1, _ := newCA(t0, 30*time.Hour)
	reg := registration()
	for i := range reg.Webhooks {
		reg.Webhooks[i].ClientConfig.CABundle = pemCert(ca0)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "tls"}, Data: issued(t, ca1, key1, t0)}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(secret, reg).Build()
	now := t0
	f := &Follower{Publisher: Publisher{Client: c, Registration: "configstamp", CASwitchDelay: time.Minute, now: func() time.Time { return now }},
		Secret: types.NamespacedName{Namespace: "ns", Name: "tls"}, CertDir: t.TempDir()}
	next, err := f.Ensure(ctx)
	if !errors.Is(err, ErrWaiting) || !next.Equal(t0.Add(time.Minute)) {
		t.Fatalf("first pass: next %v, err %v; want ErrWaiting until the switch delay", next, err)
	}
	if _, err := os.Stat(filepath.Join(f.CertDir, CertName)); err == nil {
		t.Fatal("served a certificate from a CA API servers may not trust yet")
	}
	now = t0.Add(time.Minute)
	if _, err := f.Ensure(ctx); err != nil {
		t.Fatalf("after the switch delay: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.CertDir, CertName)); !bytes.Equal(b, secret.Data[CertName]) {
		t.Fatal("not served after the switch delay")
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

// TestFollowerIntermediateCA: a certificate issued by an intermediate (tls.crt holds
// the leaf and the intermediate, ca.crt the root) is served, and the root published.
func TestFollowerIntermediateCA(t *testing.T) {
	ctx := context.Background()
	root, rootKey, _ := newCA(t0, 30*time.Hour)
	interKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "intermediate"},
		NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(20 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, root, interKey.Public(), rootKey)
	if err != nil {
		t.Fatal(err)
	}
	inter, _ := x509.ParseCertificate(der)
	data := issued(t, inter, interKey, t0)
	data[CertName] = append(data[CertName], pemCert(inter)...)
	data[CAName] = pemCert(root)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "tls"}, Data: data}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(secret, registration()).Build()
	f := &Follower{Publisher: Publisher{Client: c, Registration: "configstamp", now: func() time.Time { return t0 }},
		Secret: types.NamespacedName{Namespace: "ns", Name: "tls"}, CertDir: t.TempDir()}
	if _, err := f.Ensure(ctx); err != nil {
		t.Fatalf("leaf from an intermediate: %v", err)
	}
	var reg admissionregistrationv1.MutatingWebhookConfiguration
	_ = c.Get(ctx, client.ObjectKey{Name: "configstamp"}, &reg)
	if got := parseCerts(reg.Webhooks[0].ClientConfig.CABundle); len(got) != 1 || !got[0].Equal(root) {
		t.Fatal("the root is not the published bundle")
	}
}
