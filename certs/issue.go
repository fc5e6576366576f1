package certs

import (
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
	"slices"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// renew returns the Secret data to keep, when to look again, and whether it changed.
//
// The data: ca.crt is the bundle, the signing CA first, then older CAs still valid;
// ca.key the signing CA's key; tls.crt the serving certificate and its CA; tls.key its
// key. A serving certificate from an older CA of the bundle is kept until the signing
// CA has been trusted by the registration for the switch delay.
func (r *Rotator) renew(data map[string][]byte, now time.Time) (map[string][]byte, time.Time, bool, error) {
	out := map[string][]byte{}
	for k, v := range data {
		out[k] = v
	}
	signing, signingKey := parsePair(data[CAName], data[CAKeyName])
	var bundle []*x509.Certificate
	for _, c := range parseCerts(data[CAName]) {
		if c.NotAfter.After(now) {
			bundle = append(bundle, c)
		}
	}
	if signing == nil || now.Add(r.Validity).After(signing.NotAfter) {
		// No CA, or one that would end before a new serving certificate: a new CA,
		// first in the bundle; the older ones stay while valid, so the serving
		// certificate they signed keeps working while the new CA spreads.
		ca, key, err := newCA(now, r.CAValidity)
		if err != nil {
			return nil, time.Time{}, false, err
		}
		keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
		if err != nil {
			return nil, time.Time{}, false, err
		}
		signing, signingKey = ca, key
		bundle = append([]*x509.Certificate{ca}, bundle...)
		out[CAKeyName] = keyPEM
	}
	out[CAName] = pemCerts(bundle)
	changed := !slices.Equal(out[CAName], data[CAName]) || !slices.Equal(out[CAKeyName], data[CAKeyName])
	caRenew := signing.NotAfter.Add(-r.Validity)

	leaf, _ := parsePair(data[CertName], data[KeyName])
	usable := leaf != nil && now.Before(leaf.NotAfter) && sameHosts(leaf, r.Hosts) && signedByOneOf(leaf, bundle)
	if usable {
		due := leaf.NotAfter.Add(-r.RenewBefore)
		fromSigning := leaf.CheckSignatureFrom(signing) == nil
		if fromSigning && now.Before(due) {
			changed = pruneBundle(out, data, signing) || changed
			return out, minTime(due, caRenew), changed, nil
		}
		if !fromSigning {
			// The CA changed: switch once the registration has trusted the new one
			// long enough, or when the current certificate is about to end.
			trusted, switchAt := r.trustedFor(signing.Raw, now)
			if !trusted && now.Add(r.switchDelay()).Before(leaf.NotAfter) {
				return out, switchAt, changed, nil
			}
		}
	}
	certPEM, keyPEM, err := newServing(now, r.Validity, signing, signingKey, r.Hosts)
	if err != nil {
		return nil, time.Time{}, false, err
	}
	out[CertName] = append(certPEM, pemCert(signing)...)
	out[KeyName] = keyPEM
	pruneBundle(out, data, signing)
	return out, minTime(now.Add(r.Validity-r.RenewBefore), caRenew), true, nil
}

// pruneBundle: once the Secret's serving certificate comes from the signing CA, older
// CAs leave its bundle (the registration keeps them, retired, for the retention, for
// replicas that have not switched yet). It reports whether out's bundle changed from
// data's.
func pruneBundle(out, data map[string][]byte, signing *x509.Certificate) bool {
	out[CAName] = pemCert(signing)
	return !slices.Equal(out[CAName], data[CAName])
}

func signedByOneOf(leaf *x509.Certificate, cas []*x509.Certificate) bool {
	for _, ca := range cas {
		if leaf.CheckSignatureFrom(ca) == nil {
			return true
		}
	}
	return false
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
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

func pemCerts(cs []*x509.Certificate) []byte {
	var out []byte
	for _, c := range cs {
		out = append(out, pemCert(c)...)
	}
	return out
}
