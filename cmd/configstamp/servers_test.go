package main

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	certutil "k8s.io/client-go/util/cert"
)

// TestClientCA: --webhook-client-ca-file makes the webhook server require a client
// certificate from that CA; a file that cannot be read or holds no certificate is a
// clear error at start.
func TestClientCA(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := clientCA(filepath.Join(dir, "missing.crt")); err == nil || !strings.Contains(err.Error(), "--webhook-client-ca-file") {
		t.Errorf("missing file: %v", err)
	}
	junk := filepath.Join(dir, "junk.crt")
	if err := os.WriteFile(junk, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := clientCA(junk); err == nil || !strings.Contains(err.Error(), "--webhook-client-ca-file") {
		t.Errorf("junk file: %v", err)
	}
	certPEM, _, err := certutil.GenerateSelfSignedCertKey("test", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(good, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	set, _, err := clientCA(good)
	if err != nil {
		t.Fatal(err)
	}
	var c tls.Config
	set(&c)
	hello, err := c.GetConfigForClient(&tls.ClientHelloInfo{})
	if c.ClientAuth != tls.RequireAndVerifyClientCert || err != nil || hello.ClientCAs == nil || hello.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Errorf("TLS config: ClientAuth %v, per handshake %+v (%v)", c.ClientAuth, hello, err)
	}
}
