package integration

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/configstamp/configstamp/certs"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/webhook"
)

// TestHighAvailability runs two replicas with leader election: both answer admission,
// only the leader nudges, and when the leader stops the other takes over.
func TestHighAvailability(t *testing.T) {
	certDir := t.TempDir()
	ca, err := certs.WriteSelfSigned(certDir, "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	const leaseNS = "configstamp-system"
	env.CreateNamespace(t, leaseNS, false)
	ports := make([]int, 2)
	for i := range ports {
		ports[i] = freePort(t)
	}
	px := framework.NewProxy(t, fmt.Sprintf("127.0.0.1:%d", ports[0]))
	args := []string{"--leader-elect", "--leader-election-namespace", leaseNS, "--webhook-cert-dir", certDir}
	replicas := []*framework.Configstamp{
		env.Start(t, framework.Options{WebhookURL: "https://" + px.Addr, WebhookPort: ports[0], Args: args}),
		env.Start(t, framework.Options{WebhookURL: "https://" + px.Addr, WebhookPort: ports[1], Args: args}),
	}

	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "cfg", map[string]string{"k": "1"}))
	for i, r := range replicas {
		framework.Eventually(t, 30*time.Second, fmt.Sprintf("replica %d answers admission", i), func() error {
			return admits(r.WebhookPort, ca, ns)
		})
	}

	d := createDeployment(t, ns, "app", podWithVolumes("cfg"))
	setData(t, ns, "cfg", "k", "2")
	first := rollsOnce(t, d, docHash(t, ns, docSource{name: "cfg"}))
	leader := -1
	for i, r := range replicas {
		if nudged(r, ns, "app") {
			if leader >= 0 {
				t.Fatal("both replicas nudged")
			}
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no replica nudged")
	}

	// Stop the leader (it releases the lease); admission goes to the other replica.
	other := 1 - leader
	px.SetTarget(fmt.Sprintf("127.0.0.1:%d", ports[other]))
	replicas[leader].Stop()
	setData(t, ns, "cfg", "k", "3")
	rollsOnce(t, first, docHash(t, ns, docSource{name: "cfg"}))
	if !nudged(replicas[other], ns, "app") {
		t.Fatal("the standby did not take over the watcher")
	}
}

func nudged(p *framework.Configstamp, ns, name string) bool {
	for _, rec := range p.Logs() {
		if rec["msg"] == "Nudged Deployment after a config change" && rec["namespace"] == ns && rec["name"] == name {
			return true
		}
	}
	return false
}

// admits posts a Deployment CREATE review straight to one replica's webhook and expects
// a stamping patch.
func admits(port int, ca []byte, ns string) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	d := deployment("direct", podWithVolumes("cfg"))
	d.Namespace = ns
	raw, _ := json.Marshal(d)
	review, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "ha", Kind: metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			Resource:  metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
			Operation: admissionv1.Create, Namespace: ns, Name: "direct", Object: runtime.RawExtension{Raw: raw},
		},
	})
	resp, err := hc.Post(fmt.Sprintf("https://127.0.0.1:%d%s", port, webhook.Path), "application/json", bytes.NewReader(review))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &out); err != nil || out.Response == nil {
		return fmt.Errorf("bad response %d: %s", resp.StatusCode, body)
	}
	if !out.Response.Allowed || len(out.Response.Patch) == 0 || out.Response.AuditAnnotations[webhook.AuditHash] == "" {
		return fmt.Errorf("not stamped: %s", body)
	}
	return nil
}

// TestServingCertificateRotation replaces the certificate files under a running
// process: new TLS handshakes present the new certificate without a restart.
func TestServingCertificateRotation(t *testing.T) {
	dir := t.TempDir()
	if _, err := certs.WriteSelfSigned(dir, "127.0.0.1", "localhost"); err != nil {
		t.Fatal(err)
	}
	p := env.Start(t, framework.Options{Args: []string{"--webhook-cert-dir", dir}})
	before, err := servingSerial(p.WebhookPort)
	if err != nil {
		t.Fatal(err)
	}
	next := t.TempDir()
	if _, err := certs.WriteSelfSigned(next, "127.0.0.1", "localhost"); err != nil {
		t.Fatal(err)
	}
	want := leafSerial(t, filepath.Join(next, certs.CertName))
	// Replace the files the way a Secret volume does: new files renamed into place.
	for _, name := range []string{certs.KeyName, certs.CertName, certs.CAName} {
		if err := os.Rename(filepath.Join(next, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	framework.Eventually(t, 30*time.Second, "new certificate served", func() error {
		got, err := servingSerial(p.WebhookPort)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("serving serial %s (before %s), want %s", got, before, want)
		}
		return nil
	})
	if !p.Alive() {
		t.Fatal("process restarted or died")
	}
}

func servingSerial(port int) (string, error) {
	conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

func leafSerial(t *testing.T, path string) string {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(path, filepath.Join(filepath.Dir(path), certs.KeyName))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber.String()
}
