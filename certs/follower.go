package certs

import (
	"context"
	"crypto/x509"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
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
	root := chainRoot(secret.Data[CertName], parseCerts(secret.Data[CAName]), now)
	if root == nil {
		return time.Time{}, fmt.Errorf("secret %s: %s does not verify against a CA of %s (a CA issuer sets it)", f.Secret, CertName, CAName)
	}
	if err := f.publish(ctx, secret.Data[CAName], now, servedCA(f.CertDir, now)); err != nil {
		return time.Time{}, err
	}
	data := map[string][]byte{CertName: secret.Data[CertName], KeyName: secret.Data[KeyName], CAName: secret.Data[CAName]}
	next, err := f.serve(ctx, f.CertDir, data, leaf, root, now)
	if next.IsZero() && err == nil {
		next = now.Add(followPoll)
	}
	return next, err
}

// chainRoot is the CA of cas that the certificate chain in chainPEM (the leaf first,
// then any intermediates) verifies to at now; nil when none does.
func chainRoot(chainPEM []byte, cas []*x509.Certificate, now time.Time) *x509.Certificate {
	chain := parseCerts(chainPEM)
	if len(chain) == 0 {
		return nil
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	for _, ca := range cas {
		roots := x509.NewCertPool()
		roots.AddCert(ca)
		opts := x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
		if _, err := chain[0].Verify(opts); err == nil {
			return ca
		}
	}
	return nil
}
