package certs

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// followPoll is how often a Follower looks at its Secret without a watch event.
const followPoll = time.Minute

// Follower serves a certificate another tool keeps in a kubernetes.io/tls Secret
// (cert-manager's Certificate, with a CA issuer: ca.crt is the CA that signed tls.crt),
// and keeps the registration's caBundle trusting it. It publishes first and serves
// after: the CA of a new certificate joins the bundle (CAs already there stay while
// valid), and a certificate from a CA new to the registration is served only once the
// registration has trusted that CA for CASwitchDelay, while the certificate being served
// lasts. A renewal from the same CA is served at once. Every replica runs it.
type Follower struct {
	Publisher
	Secret  types.NamespacedName
	CertDir string
}

var _ manager.LeaderElectionRunnable = &Follower{}

// NeedLeaderElection is false: every replica serves, so every replica needs the files.
func (f *Follower) NeedLeaderElection() bool { return false }

// Start follows the Secret and the registration until ctx ends.
func (f *Follower) Start(ctx context.Context) error {
	kick, err := f.watch(ctx, &f.Secret)
	if err != nil {
		return err
	}
	return loop(ctx, kick, followPoll, "follow the serving certificate", f.Ensure)
}

// Ensure publishes the Secret's CA and serves its certificate once that is safe; it
// returns when to look again.
func (f *Follower) Ensure(ctx context.Context) (time.Time, error) {
	now := f.clock()
	var secret corev1.Secret
	if err := f.Client.Get(ctx, f.Secret, &secret); err != nil {
		return time.Time{}, fmt.Errorf("get secret %s: %w", f.Secret, err)
	}
	leaf, _ := parsePair(secret.Data[CertName], secret.Data[KeyName])
	if leaf == nil {
		return time.Time{}, fmt.Errorf("secret %s holds no certificate with its key yet (is cert-manager issuing it?)", f.Secret)
	}
	cas := parseCerts(secret.Data[CAName])
	var issuer *x509.Certificate
	for _, ca := range cas {
		if leaf.CheckSignatureFrom(ca) == nil {
			issuer = ca
		}
	}
	if issuer == nil {
		return time.Time{}, fmt.Errorf("secret %s: no CA in %s signed %s (a CA issuer sets it)", f.Secret, CAName, CertName)
	}
	if err := f.publish(ctx, secret.Data[CAName], now, true); err != nil {
		return time.Time{}, err
	}
	data := map[string][]byte{CertName: secret.Data[CertName], KeyName: secret.Data[KeyName], CAName: secret.Data[CAName]}
	served, err := os.ReadFile(filepath.Join(f.CertDir, CertName))
	if err == nil && bytes.Equal(served, data[CertName]) {
		return now.Add(followPoll), nil
	}
	// A new certificate. Serve it now unless its CA is new to the registration and the
	// certificate being served still has time left.
	cur, _ := parsePair(served, readFile(filepath.Join(f.CertDir, KeyName)))
	if cur != nil && now.Add(f.switchDelay()).Before(cur.NotAfter) {
		since, trusted := f.trustedSince(issuer.Raw)
		switchAt := since.Add(f.switchDelay())
		if !trusted {
			switchAt = now.Add(f.switchDelay())
		}
		if now.Before(switchAt) && !f.sameIssuer(cur, issuer) {
			logf.FromContext(ctx).V(1).Info("Waiting before serving a certificate from a new CA", "secret", f.Secret.String(), "at", switchAt)
			return switchAt, nil
		}
	}
	if err := writeFiles(f.CertDir, data); err != nil {
		return time.Time{}, err
	}
	logf.FromContext(ctx).Info("Serving the certificate of the Secret", "secret", f.Secret.String(), "notAfter", leaf.NotAfter, "issuer", issuer.Subject.CommonName)
	return now.Add(followPoll), nil
}

// sameIssuer: cur was signed by issuer (a renewal from the same CA, already trusted).
func (f *Follower) sameIssuer(cur, issuer *x509.Certificate) bool {
	return cur.CheckSignatureFrom(issuer) == nil
}

func readFile(path string) []byte {
	b, _ := os.ReadFile(path)
	return b
}
