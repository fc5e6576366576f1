package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/certs"
	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/webhook"
)

// selfSignedSetup is the install as the chart makes it in self-signed mode: an empty
// Opaque Secret and the registration without a caBundle, calling port.
func selfSignedSetup(t *testing.T, ns string, port int) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	env.CreateNamespace(t, ns, false)
	deleteRegistration(t)
	t.Cleanup(func() { deleteRegistration(t) })
	sc, err := scope.New(stamp.InjectLabel, scope.DefaultExcluded)
	if err != nil {
		t.Fatal(err)
	}
	reg := webhook.Registration(admissionregistrationv1.WebhookClientConfig{URL: new(fmt.Sprintf("https://127.0.0.1:%d", port))}, sc, workload.Builtin())
	create(t, reg)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "configstamp-webhook-tls"}, Type: corev1.SecretTypeOpaque}
	_ = k8s.Delete(bg, secret) // a previous run's
	create(t, secret)
	t.Cleanup(func() { _ = k8s.Delete(bg, secret) })
	return reg
}

// wipeBundle replaces the registration as helm upgrade --force or kubectl replace of the
// chart's manifest does: no caBundle in any entry.
func wipeBundle(t *testing.T, name string) {
	t.Helper()
	// The watcher annotates the registration too: retry on a conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur admissionregistrationv1.MutatingWebhookConfiguration
		if err := k8s.Get(bg, client.ObjectKey{Name: name}, &cur); err != nil {
			return err
		}
		for i := range cur.Webhooks {
			cur.Webhooks[i].ClientConfig.CABundle = nil
		}
		return k8s.Update(bg, &cur)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func selfSignedArgs(ns string, extra ...string) []string {
	return append([]string{"--self-signed-secret", ns + "/configstamp-webhook-tls", "--self-signed-hosts", "127.0.0.1"}, extra...)
}

// bundleOf is the caBundle of the registration's first entry, and whether every entry
// has the same.
func bundleOf(t *testing.T, name string) ([]byte, bool) {
	t.Helper()
	var reg admissionregistrationv1.MutatingWebhookConfiguration
	if err := k8s.Get(bg, client.ObjectKey{Name: name}, &reg); err != nil {
		t.Fatal(err)
	}
	for _, w := range reg.Webhooks[1:] {
		if !bytes.Equal(w.ClientConfig.CABundle, reg.Webhooks[0].ClientConfig.CABundle) {
			return reg.Webhooks[0].ClientConfig.CABundle, false
		}
	}
	return reg.Webhooks[0].ClientConfig.CABundle, true
}

// handshake verifies the server on port against bundle, as the API server does, and
// returns the serving certificate.
func handshake(port int, bundle []byte) (*x509.Certificate, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		return nil, fmt.Errorf("empty bundle")
	}
	conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// TestSelfSignedConcurrentStart: two replicas started at once in self-signed mode
// against the chart's empty Secret both serve, with one certificate, and neither exits;
// a registration replaced without its caBundle (helm upgrade --force, kubectl replace)
// gets it back within seconds.
func TestSelfSignedConcurrentStart(t *testing.T) {
	const ns = "configstamp-selfsigned-race"
	ports := make([]int, 2)
	for i := range ports {
		ports[i] = freePort(t)
	}
	reg := selfSignedSetup(t, ns, ports[0])
	procs := make([]*framework.Configstamp, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Go(func() {
			procs[i], errs[i] = env.Run(bg, framework.Options{SkipRegistration: true, WebhookPort: ports[i],
				Args: selfSignedArgs(ns, "--webhook-cert-dir", t.TempDir())})
		})
	}
	wg.Wait()
	for i, p := range procs {
		if p != nil {
			t.Cleanup(p.Stop)
		}
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
	}
	var s corev1.Secret
	if err := k8s.Get(bg, client.ObjectKey{Namespace: ns, Name: "configstamp-webhook-tls"}, &s); err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(s.Data[certs.CertName])
	if block == nil {
		t.Fatal("the Secret holds no certificate")
	}
	bundle, same := bundleOf(t, reg.Name)
	if !same || !bytes.Equal(bundle, s.Data[certs.CAName]) {
		t.Fatal("the registration does not trust the Secret's CA in every entry")
	}
	framework.Eventually(t, 15*time.Second, "both replicas serve the Secret's certificate", func() error {
		for i, port := range ports {
			leaf, err := handshake(port, bundle)
			if err != nil {
				return fmt.Errorf("replica %d: %v", i, err)
			}
			if !bytes.Equal(leaf.Raw, block.Bytes) {
				return fmt.Errorf("replica %d serves serial %s, not the Secret's", i, leaf.SerialNumber)
			}
		}
		return nil
	})
	for i, p := range procs {
		if !p.Alive() {
			t.Errorf("replica %d exited:\n%s", i, p.Output())
		}
		if strings.Contains(p.Output(), "Another replica wrote the certificate first") {
			t.Logf("replica %d lost the race for the Secret and used the winner's certificate", i)
		}
	}

	wipeBundle(t, reg.Name)
	framework.Eventually(t, 10*time.Second, "caBundle put back", func() error {
		if got, same := bundleOf(t, reg.Name); !same || !bytes.Equal(got, s.Data[certs.CAName]) {
			return fmt.Errorf("caBundle not back yet")
		}
		return nil
	})
}

// TestSelfSignedCARollover forces CA rollovers with short lifetimes and checks, all the
// way through, that the serving certificate always verifies against the registration's
// bundle (never served before the bundle trusts it), that admissions through the API
// server are all stamped (no failed call, which would fail open), and that the bundle
// never goes back to an older CA.
func TestSelfSignedCARollover(t *testing.T) {
	const ns = "configstamp-ca-rollover"
	port := freePort(t)
	reg := selfSignedSetup(t, ns, port)
	// CA of 40 s, renewed 20 s before its end; serving certificates of 20 s, renewed
	// 10 s before theirs; a new CA served 3 s after the registration trusts it.
	env.Start(t, framework.Options{SkipRegistration: true, WebhookPort: port, Args: selfSignedArgs(ns,
		"--webhook-cert-dir", t.TempDir(), "--self-signed-validity", "20s", "--self-signed-renew-before", "10s",
		"--self-signed-ca-validity", "40s", "--ca-switch-delay", "3s")})

	m := monitorTrust(t, reg.Name, port)
	// Until the server has presented certificates of three CAs (two rollovers), at most
	// 100 s.
	deadline := time.Now().Add(100 * time.Second)
	for time.Now().Before(deadline) && m.issuerCount() < 3 {
		time.Sleep(time.Second)
	}
	m.stop(t, 2*time.Second) // the switch delay is 3 s; the monitor looks every 100 ms
	if n := m.issuerCount(); n < 3 {
		t.Errorf("served certificates of %d CAs in 100 s, want 3 (two rollovers)", n)
	}
}

// trustMonitor checks, until stopped, every 100 ms that the webhook server's
// certificate verifies against the registration's current bundle (as the API server
// verifies it) and that the bundle never goes back to an older CA, and every 250 ms
// that a dry-run admission through the API server is stamped (a failed call would fail
// open, unstamped).
type trustMonitor struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	mu       sync.Mutex
	failures []string
	issuers  map[string]bool
	// inBundle and served: when each CA (by common name) was first seen in the
	// registration's bundle, and first seen signing the served certificate.
	inBundle, served map[string]time.Time
	initial          map[string]bool // in the bundle at the first look
	newestCA         time.Time
	handshook        atomic.Int64
	admitted         atomic.Int64
}

func monitorTrust(t *testing.T, registration string, port int) *trustMonitor {
	ctx, cancel := context.WithCancel(bg)
	m := &trustMonitor{cancel: cancel, issuers: map[string]bool{}, inBundle: map[string]time.Time{}, served: map[string]time.Time{}}
	t.Cleanup(cancel)
	m.wg.Go(func() {
		for ctx.Err() == nil {
			var cur admissionregistrationv1.MutatingWebhookConfiguration
			if err := k8s.Get(ctx, client.ObjectKey{Name: registration}, &cur); err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			seen := time.Now()
			bundle := cur.Webhooks[0].ClientConfig.CABundle
			var newest time.Time
			m.mu.Lock()
			first := m.initial == nil
			if first {
				m.initial = map[string]bool{}
			}
			for _, c := range mustParse(bundle) {
				newest = later(newest, c.NotBefore)
				if _, ok := m.inBundle[c.Subject.CommonName]; !ok {
					m.inBundle[c.Subject.CommonName] = seen
					m.initial[c.Subject.CommonName] = first
				}
			}
			if newest.Before(m.newestCA) {
				m.fail("the bundle went back to an older CA (newest %s, was %s)", newest, m.newestCA)
			}
			m.newestCA = later(m.newestCA, newest)
			m.mu.Unlock()
			leaf, err := handshake(port, bundle)
			m.mu.Lock()
			if err != nil {
				m.fail("handshake against the registration's bundle: %v", err)
			} else {
				m.issuers[leaf.Issuer.CommonName] = true
				if _, ok := m.served[leaf.Issuer.CommonName]; !ok {
					m.served[leaf.Issuer.CommonName] = time.Now()
				}
				m.handshook.Add(1)
			}
			m.mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	})
	m.wg.Go(func() {
		for ctx.Err() == nil {
			d := framework.ProbeDeployment()
			err := k8s.Create(ctx, d, client.DryRunAll)
			m.mu.Lock()
			switch {
			case err != nil && ctx.Err() == nil:
				m.fail("dry-run create: %v", err)
			case err == nil && hashOf(d) == "":
				m.fail("an admission was not stamped (the API server's call failed)")
			case err == nil:
				m.admitted.Add(1)
			}
			m.mu.Unlock()
			time.Sleep(250 * time.Millisecond)
		}
	})
	return m
}

// fail records a failure; m.mu is held.
func (m *trustMonitor) fail(f string, a ...any) {
	if len(m.failures) < 10 {
		m.failures = append(m.failures, fmt.Sprintf(time.Now().Format("15:04:05.000 ")+f, a...))
	}
}

func (m *trustMonitor) issuerCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.issuers)
}

// stop ends the checks and reports their failures, and any CA that signed the served
// certificate sooner than minGap after it joined the registration's bundle (a CA there
// from the first look excepted): a certificate served before API servers had the
// switch delay to trust its CA.
func (m *trustMonitor) stop(t *testing.T, minGap time.Duration) {
	t.Helper()
	m.cancel()
	m.wg.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, f := range m.failures {
		t.Error(f)
	}
	for ca, at := range m.served {
		if m.initial[ca] {
			continue
		}
		joined, ok := m.inBundle[ca]
		if !ok {
			t.Errorf("served a certificate of %s, never seen in the bundle", ca)
		} else if gap := at.Sub(joined); gap < minGap {
			t.Errorf("served a certificate of %s %v after it joined the bundle, want at least %v", ca, gap.Round(time.Millisecond), minGap)
		}
	}
	t.Logf("%d handshakes, %d admissions stamped, CAs served: %d", m.handshook.Load(), m.admitted.Load(), len(m.issuers))
}

func mustParse(bundle []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for rest := bundle; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return out
		}
		if c, err := x509.ParseCertificate(b.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
