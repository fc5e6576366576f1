package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// webhookClientAuth writes a CA, a client certificate it signs, and the admission
// configuration under which the API server presents that certificate to every
// admission webhook (the kubeconfig user "*", which matches any webhook's host), and
// returns the API server's flag and the CA's path.
func (c *Cluster) webhookClientAuth() (flags []string, caFile string, err error) {
	dir := filepath.Join(c.Dir, "pki")
	ca, caKey, err := NewCA("webhook-client-ca")
	if err != nil {
		return nil, "", err
	}
	certPEM, keyPEM, err := SignClient(ca, caKey, "kube-apiserver-webhook-client")
	if err != nil {
		return nil, "", err
	}
	caFile = filepath.Join(dir, "webhook-client-ca.crt")
	certFile, keyFile := filepath.Join(dir, "webhook-client.crt"), filepath.Join(dir, "webhook-client.key")
	kubeconfig, config := filepath.Join(dir, "admission-kubeconfig.yaml"), filepath.Join(dir, "admission-config.yaml")
	files := map[string]string{
		caFile: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})), certFile: string(certPEM), keyFile: string(keyPEM),
		kubeconfig: `apiVersion: v1
kind: Config
users:
- name: "*"
  user:
    client-certificate: ` + certFile + `
    client-key: ` + keyFile + `
`,
		config: `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: ` + kubeconfig + `
`,
	}
	for name, content := range files {
		if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
			return nil, "", err
		}
	}
	return []string{"--admission-control-config-file", config}, caFile, nil
}

// NewCA returns a new self-signed CA certificate and its key.
func NewCA(name string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	return issue(name, nil, nil)
}

// SignClient returns a client certificate for name signed by ca, and its key, in PEM.
func SignClient(ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string) (certPEM, keyPEM []byte, err error) {
	cert, key, err := issue(name, ca, caKey)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// issue makes a certificate for name valid for a week: a CA signing itself when parent
// is nil, else a client certificate parent signs.
func issue(name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(7 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if parent == nil {
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		tmpl.ExtKeyUsage, tmpl.BasicConstraintsValid, tmpl.IsCA = nil, true, true
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}
