// Package certs provisions the webhook's serving certificate. In dev mode (and in the
// tests) configstamp generates its own CA and serving certificate; in a cluster,
// cert-manager issues them (see deploy/).
package certs

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	certutil "k8s.io/client-go/util/cert"
)

// File names controller-runtime's webhook server reads from its cert dir, and the CA
// that signed the certificate (the registration's caBundle), as cert-manager names them.
const (
	CertName = "tls.crt"
	KeyName  = "tls.key"
	CAName   = "ca.crt"
)

// EnsureSelfSigned returns the CA of the certificate in dir, generating a CA and a
// serving certificate for hosts first unless dir already holds tls.crt, tls.key and
// ca.crt (so several processes, or a restart, can share one certificate).
func EnsureSelfSigned(dir string, hosts ...string) ([]byte, error) {
	ca, errCA := os.ReadFile(filepath.Join(dir, CAName))
	_, errCert := os.Stat(filepath.Join(dir, CertName))
	_, errKey := os.Stat(filepath.Join(dir, KeyName))
	if errCA == nil && errCert == nil && errKey == nil {
		return ca, nil
	}
	return WriteSelfSigned(dir, hosts...)
}

// WriteSelfSigned generates a fresh CA and a serving certificate signed by it for hosts
// (IP addresses or DNS names), writes tls.crt (certificate, then CA), tls.key and ca.crt
// into dir, and returns the CA certificate in PEM for the registration's caBundle.
func WriteSelfSigned(dir string, hosts ...string) ([]byte, error) {
	if len(hosts) == 0 {
		return nil, fmt.Errorf("no host for the serving certificate")
	}
	var ips []net.IP
	var dns []string
	for _, h := range hosts[1:] {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, h)
		}
	}
	chain, key, err := certutil.GenerateSelfSignedCertKeyWithOptions(certutil.SelfSignedCertKeyOptions{
		Host: hosts[0], AlternateIPs: ips, AlternateDNS: dns,
	})
	if err != nil {
		return nil, fmt.Errorf("generate serving certificate: %w", err)
	}
	// client-go puts the CA last in the chain.
	chainCerts := parseCerts(chain)
	if len(chainCerts) == 0 {
		return nil, fmt.Errorf("no certificate in generated chain")
	}
	ca := pemCert(chainCerts[len(chainCerts)-1])
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create cert dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, CAName), ca, 0o644); err != nil {
		return nil, fmt.Errorf("write CA: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, KeyName), key, 0o600); err != nil {
		return nil, fmt.Errorf("write key: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, CertName), chain, 0o644); err != nil {
		return nil, fmt.Errorf("write certificate: %w", err)
	}
	return ca, nil
}
