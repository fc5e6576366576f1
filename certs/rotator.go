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
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// CAKeyName is the Secret key holding the CA's private key in self-signed mode.
const CAKeyName = "ca.key"

// Rotator is the self-signed certificate mode, for clusters without cert-manager: it
// keeps a CA and a serving certificate in a Secret, renews them before they expire,
// writes them into the webhook server's cert dir (controller-runtime's cert watcher
// reloads them) and keeps the registration's caBundle current. Every replica runs it;
// writes to the Secret use optimistic concurrency, so replicas agree on one certificate.
type Rotator struct {
	// Client reads and writes the Secret and the registration directly (no cache).
	Client client.Client
	Secret types.NamespacedName
	// Registration is the MutatingWebhookConfiguration whose caBundle is kept current;
	// empty: none.
	Registration string
	// Hosts are the serving certificate's DNS names or IP addresses.
	Hosts   []string
	CertDir string
	// Validity and RenewBefore govern the serving certificate; the CA lives CAValidity
	// and is replaced when it would expire before a new serving certificate does.
	Validity, RenewBefore, CAValidity time.Duration

	now func() time.Time
}

var _ manager.LeaderElectionRunnable = &Rotator{}

// NeedLeaderElection is false: every replica serves, so every replica needs the files.
func (r *Rotator) NeedLeaderElection() bool { return false }

// Start renews the certificate whenever it is due, until ctx ends.
func (r *Rotator) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("certs")
	for {
		next, err := r.Ensure(ctx)
		wait := time.Until(next)
		if err != nil {
			log.Error(err, "Failed to ensure the self-signed certificate; retrying")
			wait = 10 * time.Second
		}
		wait = min(max(wait, time.Second), 5*time.Minute)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// Ensure makes the Secret, the cert dir and the registration hold a valid certificate,
// and returns when it should next be renewed.
func (r *Rotator) Ensure(ctx context.Context) (time.Time, error) {
	now := time.Now()
	if r.now != nil {
		now = r.now()
	}
	var secret corev1.Secret
	err := r.Client.Get(ctx, r.Secret, &secret)
	create := apierrors.IsNotFound(err)
	if err != nil && !create {
		return time.Time{}, fmt.Errorf("get secret %s: %w", r.Secret, err)
	}
	if create {
		secret = corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.Secret.Namespace, Name: r.Secret.Name}, Type: corev1.SecretTypeTLS}
	}
	data, renewAt, changed, err := r.renew(secret.Data, now)
	if err != nil {
		return time.Time{}, err
	}
	if changed {
		secret.Data = data
		if create {
			err = r.Client.Create(ctx, &secret)
		} else {
			err = r.Client.Update(ctx, &secret)
		}
		if err != nil {
			// Another replica may have won: the next pass reads its certificate.
			return time.Time{}, fmt.Errorf("write secret %s: %w", r.Secret, err)
		}
		logf.FromContext(ctx).Info("Issued self-signed serving certificate", "secret", r.Secret.String(), "renewAt", renewAt)
	}
	if err := r.writeFiles(data); err != nil {
		return time.Time{}, err
	}
	if err := r.injectCA(ctx, data[CAName]); err != nil {
		return time.Time{}, err
	}
	return renewAt, nil
}

// renew returns the Secret data to keep, when to renew it, and whether it changed.
func (r *Rotator) renew(data map[string][]byte, now time.Time) (map[string][]byte, time.Time, bool, error) {
	caCert, caKey := parsePair(data[CAName], data[CAKeyName])
	bundle := data[CAName]
	if caCert == nil || now.Add(r.Validity).After(caCert.NotAfter) {
		var err error
		if caCert, caKey, err = newCA(now, r.CAValidity); err != nil {
			return nil, time.Time{}, false, err
		}
		// The new CA first, then the old ones still valid, so pods holding a
		// certificate from the old CA keep working while the new one spreads.
		next := pemCert(caCert)
		for _, old := range parseCerts(bundle) {
			if old.NotAfter.After(now) {
				next = append(next, pemCert(old)...)
			}
		}
		bundle = next
		data = nil
	}
	// Renew the serving certificate RenewBefore its end, and the CA before it would end
	// before a new serving certificate does.
	caRenew := caCert.NotAfter.Add(-r.Validity)
	leaf, _ := parsePair(data[CertName], data[KeyName])
	if leaf != nil && leaf.CheckSignatureFrom(caCert) == nil && now.Before(leaf.NotAfter.Add(-r.RenewBefore)) && sameHosts(leaf, r.Hosts) {
		return data, minTime(leaf.NotAfter.Add(-r.RenewBefore), caRenew), false, nil
	}
	certPEM, keyPEM, err := newServing(now, r.Validity, caCert, caKey, r.Hosts)
	if err != nil {
		return nil, time.Time{}, false, err
	}
	caKeyPEM, err := keyutil.MarshalPrivateKeyToPEM(caKey)
	if err != nil {
		return nil, time.Time{}, false, err
	}
	out := map[string][]byte{CertName: append(certPEM, pemCert(caCert)...), KeyName: keyPEM, CAName: bundle, CAKeyName: caKeyPEM}
	return out, minTime(now.Add(r.Validity-r.RenewBefore), caRenew), true, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// writeFiles puts the certificate, key and CA into the cert dir when they differ,
// renaming new files into place so the cert watcher never reads half a file.
func (r *Rotator) writeFiles(data map[string][]byte) error {
	if err := os.MkdirAll(r.CertDir, 0o700); err != nil {
		return err
	}
	for _, name := range []string{KeyName, CertName, CAName} {
		path := filepath.Join(r.CertDir, name)
		if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, data[name]) {
			continue
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, data[name], 0o600); err != nil {
			return fmt.Errorf("write %s: %w", tmp, err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
	}
	return nil
}

func (r *Rotator) injectCA(ctx context.Context, bundle []byte) error {
	if r.Registration == "" {
		return nil
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := r.Client.Get(ctx, client.ObjectKey{Name: r.Registration}, &mwc); err != nil {
		return fmt.Errorf("get registration %s: %w", r.Registration, err)
	}
	changed := false
	for i := range mwc.Webhooks {
		if !bytes.Equal(mwc.Webhooks[i].ClientConfig.CABundle, bundle) {
			mwc.Webhooks[i].ClientConfig.CABundle = bundle
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if err := r.Client.Update(ctx, &mwc); err != nil {
		return fmt.Errorf("update caBundle of %s: %w", r.Registration, err)
	}
	logf.FromContext(ctx).Info("Updated the registration's caBundle", "registration", r.Registration)
	return nil
}

func newCA(now time.Time, validity time.Duration) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: fmt.Sprintf("configstamp-ca@%d", now.Unix())}, key)
	if err != nil {
		return nil, nil, err
	}
	// client-go's helper fixes a 10-year validity; re-sign with ours.
	tmpl := *ca
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(validity)
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, &tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	ca, err = x509.ParseCertificate(der)
	return ca, key, err
}

func newServing(now time.Time, validity time.Duration, ca *x509.Certificate, caKey crypto.Signer, hosts []string) ([]byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now.Add(-5 * time.Minute), NotAfter: now.Add(validity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: der}), keyPEM, nil
}

// parsePair parses a certificate (the first of a chain) and its private key; nil when
// either is missing or they do not match.
func parsePair(certPEM, keyPEM []byte) (*x509.Certificate, crypto.Signer) {
	certs := parseCerts(certPEM)
	if len(certs) == 0 {
		return nil, nil
	}
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, nil
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, nil
	}
	pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(certs[0].PublicKey) {
		return nil, nil
	}
	return certs[0], signer
}

func parseCerts(b []byte) []*x509.Certificate {
	if len(b) == 0 {
		return nil
	}
	certs, err := certutil.ParseCertsPEM(b)
	if err != nil {
		return nil
	}
	return certs
}

func pemCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: c.Raw})
}

func sameHosts(c *x509.Certificate, hosts []string) bool {
	var have []string
	have = append(have, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		have = append(have, ip.String())
	}
	want := slices.Clone(hosts)
	slices.Sort(have)
	slices.Sort(want)
	return slices.Equal(have, want)
}
