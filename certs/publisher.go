package certs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// Publisher keeps a registration's caBundle, and remembers since when the registration
// has trusted each CA, so that a certificate from a new CA is served only once API
// servers have had time to trust it.
type Publisher struct {
	// Client reads and writes the registration (and the Secret) directly, no cache.
	Client client.Client
	// Watch, when set, watches the registration (and the Secret) by name, so that a
	// bundle wiped by a replace (helm upgrade --force, kubectl replace) is put back, and
	// a certificate written by another replica or cert-manager followed, within seconds.
	Watch kubernetes.Interface
	// Registration is the MutatingWebhookConfiguration whose caBundle is kept; empty:
	// none (every CA then counts as trusted).
	Registration string
	// CASwitchDelay: see DefaultCASwitchDelay (0: the default).
	CASwitchDelay time.Duration

	now func() time.Time

	mu sync.Mutex
	// trusted records when this process first saw the registration trust each CA
	// (by SHA-256 of its DER).
	trusted map[[32]byte]time.Time
}

func (p *Publisher) clock() time.Time {
	if p.now != nil {
		return p.now()
	}
	return time.Now()
}

func (p *Publisher) switchDelay() time.Duration {
	if p.CASwitchDelay > 0 {
		return p.CASwitchDelay
	}
	return DefaultCASwitchDelay
}

// trustedSince is when this process first saw the registration trust ca (ok false: not
// yet). Without a registration to keep, every CA counts as trusted.
func (p *Publisher) trustedSince(ca []byte) (time.Time, bool) {
	if p.Registration == "" {
		return time.Time{}, true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.trusted[sha256.Sum256(ca)]
	return t, ok
}

func (p *Publisher) markTrusted(cas []*x509.Certificate, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.trusted == nil {
		p.trusted = map[[32]byte]time.Time{}
	}
	for _, c := range cas {
		k := sha256.Sum256(c.Raw)
		if _, ok := p.trusted[k]; !ok {
			p.trusted[k] = now
		}
	}
}

// publish makes every entry of the registration trust bundle, and records which CAs the
// registration trusts from now on.
//
// With keep, CAs the registration already trusts stay while they are valid (the
// bundle is ours plus those: a certificate from an older CA keeps working). Without it,
// the bundle is exactly ours, unless the registration already trusts a CA newer than
// any in it: then this pass read an older Secret than another replica wrote (errStale,
// read again), and an older bundle is never written back.
func (p *Publisher) publish(ctx context.Context, bundle []byte, now time.Time, keep bool) error {
	if p.Registration == "" {
		return nil
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := p.Client.Get(ctx, client.ObjectKey{Name: p.Registration}, &mwc); err != nil {
		return fmt.Errorf("get registration %s: %w", p.Registration, err)
	}
	ours := parseCerts(bundle)
	if keep {
		for _, w := range mwc.Webhooks {
			for _, c := range parseCerts(w.ClientConfig.CABundle) {
				if c.NotAfter.After(now) && !contains(ours, c) {
					ours = append(ours, c)
				}
			}
		}
		bundle = pemCerts(ours)
	}
	var newest time.Time
	for _, c := range ours {
		if c.NotBefore.After(newest) {
			newest = c.NotBefore
		}
	}
	changed := false
	for i := range mwc.Webhooks {
		cur := mwc.Webhooks[i].ClientConfig.CABundle
		if bytes.Equal(cur, bundle) {
			continue
		}
		for _, c := range parseCerts(cur) {
			if c.NotAfter.After(now) && c.NotBefore.After(newest) && !contains(ours, c) {
				return fmt.Errorf("%w: registration %s trusts %s (from %s)", errStale, p.Registration, c.Subject.CommonName, c.NotBefore.Format(time.RFC3339))
			}
		}
		mwc.Webhooks[i].ClientConfig.CABundle = bundle
		changed = true
	}
	if changed {
		if err := p.Client.Update(ctx, &mwc); err != nil {
			return fmt.Errorf("update caBundle of %s: %w", p.Registration, err)
		}
		logf.FromContext(ctx).Info("Updated the registration's caBundle", "registration", p.Registration, "cas", len(ours))
	}
	if len(mwc.Webhooks) > 0 {
		p.markTrusted(ours, now)
	}
	return nil
}

func contains(cs []*x509.Certificate, c *x509.Certificate) bool {
	for _, o := range cs {
		if o.Equal(c) {
			return true
		}
	}
	return false
}

// watch returns a channel that receives whenever the registration, or the Secret when
// given, is created or changes (nothing without Watch). Each is listed and watched as
// one object by name (RBAC resourceNames allow that with the metadata.name selector).
func (p *Publisher) watch(ctx context.Context, secret *types.NamespacedName) (<-chan struct{}, error) {
	kick := make(chan struct{}, 1)
	if p.Watch == nil {
		return kick, nil
	}
	send := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	handler := toolscache.ResourceEventHandlerFuncs{AddFunc: func(any) { send() }, UpdateFunc: func(any, any) { send() }}
	byName := func(name string) func(*metav1.ListOptions) {
		sel := fields.OneTermEqualSelector("metadata.name", name).String()
		return func(o *metav1.ListOptions) { o.FieldSelector = sel }
	}
	type target struct {
		lw  *toolscache.ListWatch
		obj runtime.Object
	}
	var targets []target
	if p.Registration != "" {
		targets = append(targets, target{toolscache.NewFilteredListWatchFromClient(p.Watch.AdmissionregistrationV1().RESTClient(),
			"mutatingwebhookconfigurations", metav1.NamespaceAll, byName(p.Registration)), &admissionregistrationv1.MutatingWebhookConfiguration{}})
	}
	if secret != nil {
		targets = append(targets, target{toolscache.NewFilteredListWatchFromClient(p.Watch.CoreV1().RESTClient(),
			"secrets", secret.Namespace, byName(secret.Name)), &corev1.Secret{}})
	}
	for _, t := range targets {
		inf := toolscache.NewSharedIndexInformer(t.lw, t.obj, 0, toolscache.Indexers{})
		if _, err := inf.AddEventHandler(handler); err != nil {
			return nil, err
		}
		go inf.RunWithContext(ctx)
	}
	return kick, nil
}

// loop runs ensure whenever it is due, when kick fires, and at least every maxWait,
// retrying errors after 10 s, until ctx ends.
func loop(ctx context.Context, kick <-chan struct{}, maxWait time.Duration, what string, ensure func(context.Context) (time.Time, error)) error {
	log := logf.FromContext(ctx).WithName("certs")
	for {
		next, err := ensure(ctx)
		wait := time.Until(next)
		if err != nil {
			log.Error(err, "Failed to "+what+"; retrying")
			wait = 10 * time.Second
		}
		wait = min(max(wait, time.Second), maxWait)
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		case <-time.After(wait):
		}
	}
}

// writeFiles puts the certificate, key and CA into dir when they differ, renaming new
// files into place so the cert watcher never reads half a file.
func writeFiles(dir string, data map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, name := range []string{KeyName, CertName, CAName} {
		path := filepath.Join(dir, name)
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
