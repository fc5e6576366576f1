package certs

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteSelfSigned(t *testing.T) {
	dir := t.TempDir()
	ca, err := WriteSelfSigned(dir, "127.0.0.1", "localhost", "configstamp.configstamp.svc")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, CertName), filepath.Join(dir, KeyName))
	if err != nil {
		t.Fatalf("written pair does not load: %v", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("returned CA is not PEM")
	}
	for _, host := range []string{"127.0.0.1", "localhost", "configstamp.configstamp.svc"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: host}); err != nil {
			t.Errorf("certificate does not verify for %s against the returned CA: %v", host, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "other.example"}); err == nil {
		t.Error("certificate verifies for a host it was not issued for")
	}
	if st, _ := os.Stat(filepath.Join(dir, KeyName)); st.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v, want 0600", st.Mode().Perm())
	}
	if _, err := WriteSelfSigned(dir); err == nil {
		t.Error("no hosts: want an error")
	}
	again, err := EnsureSelfSigned(dir, "127.0.0.1")
	if err != nil || string(again) != string(ca) {
		t.Errorf("EnsureSelfSigned over a complete dir must reuse its CA (err %v)", err)
	}
	fresh, err := EnsureSelfSigned(t.TempDir(), "127.0.0.1")
	if err != nil || len(fresh) == 0 || string(fresh) == string(ca) {
		t.Errorf("EnsureSelfSigned over an empty dir must generate a new CA (err %v)", err)
	}
}
