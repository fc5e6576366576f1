package certs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	// (by SHA-256 of its DER); added, when this process added one to it.
	trusted, added map[[32]byte]time.Time
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

// markTrusted records now as when the registration began to trust each of cas, unless
// known already.
func (p *Publisher) markTrusted(cas []*x509.Certificate, now time.Time) {
	p.mark(&p.trusted, cas, now, false)
}

// markAdded records now as when this process added each of cas to the registration.
func (p *Publisher) markAdded(cas []*x509.Certificate, now time.Time) {
	p.mark(&p.added, cas, now, true)
}

func (p *Publisher) mark(m *map[[32]byte]time.Time, cas []*x509.Certificate, now time.Time, overwrite bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if *m == nil {
		*m = map[[32]byte]time.Time{}
	}
	for _, c := range cas {
		k := sha256.Sum256(c.Raw)
		if _, ok := (*m)[k]; overwrite || !ok {
			(*m)[k] = now
		}
	}
}

// RetiredAnnotation, on the registration, lists the CAs of its caBundle that the
// certificate configstamp keeps no longer names, each with when it was first found so
// (JSON: hex SHA-256 of the CA -> RFC 3339 time). They stay trusted for a while, so that
// nothing still served loses trust: a replica serving the old CA's certificate until its
// switch, one that read an older Secret, the old pods of a certificate-mode switch.
const RetiredAnnotation = "configstamp.io/retired-cas"

// retention is how long a retired CA stays in the bundle: every replica has switched
// well within it.
func (p *Publisher) retention() time.Duration { return max(time.Hour, 3*p.switchDelay()) }

// publish makes every entry of the registration trust bundle, plus the CAs it trusted
// that bundle no longer holds, each for retention after it was first found retired (see
// RetiredAnnotation); expired CAs leave. Every replica computes the same bundle from the
// registration and its Secret, so none undoes another's; a replica that read an older
// Secret keeps the newer CA it does not know as retired until it reads again. It records
// since when the registration trusts each CA, and returns the CAs this pass added. A
// registration that does not exist yet is no error: there is nothing to keep (its
// creation is watched).
func (p *Publisher) publish(ctx context.Context, bundle []byte, now time.Time) ([]*x509.Certificate, error) {
	if p.Registration == "" {
		return nil, nil
	}
	log := logf.FromContext(ctx)
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := p.Client.Get(ctx, client.ObjectKey{Name: p.Registration}, &mwc); err != nil {
		if apierrors.IsNotFound(err) {
			log.V(1).Info("No registration yet; its caBundle is filled when it appears", "registration", p.Registration)
			return nil, nil
		}
		return nil, fmt.Errorf("get registration %s: %w", p.Registration, err)
	}
	var ours []*x509.Certificate
	for _, c := range parseCerts(bundle) {
		if c.NotAfter.After(now) {
			ours = append(ours, c)
		}
	}
	retiredSince := map[string]time.Time{}
	_ = json.Unmarshal([]byte(mwc.Annotations[RetiredAnnotation]), &retiredSince) // malformed: start afresh
	next := slices.Clone(ours)
	retired := map[string]time.Time{}
	var inAll []*x509.Certificate // trusted by every entry before this pass
	hadTrust := false             // some entry trusted a valid CA before this pass
	for i, w := range mwc.Webhooks {
		cur := parseCerts(w.ClientConfig.CABundle)
		hadTrust = hadTrust || slices.ContainsFunc(cur, func(c *x509.Certificate) bool { return c.NotAfter.After(now) })
		if i == 0 {
			inAll = cur
		} else {
			inAll = slices.DeleteFunc(inAll, func(c *x509.Certificate) bool { return !contains(cur, c) })
		}
		for _, c := range cur {
			if !c.NotAfter.After(now) || contains(next, c) {
				continue
			}
			fp := fingerprint(c)
			since, ok := retiredSince[fp]
			if !ok || since.After(now) {
				since = now
			}
			if now.Sub(since) < p.retention() {
				next = append(next, c)
				retired[fp] = since
			}
		}
	}
	out := pemCerts(next)
	changed := false
	for i := range mwc.Webhooks {
		if !bytes.Equal(mwc.Webhooks[i].ClientConfig.CABundle, out) {
			mwc.Webhooks[i].ClientConfig.CABundle = out
			changed = true
		}
	}
	ann := ""
	if len(retired) > 0 {
		b, _ := json.Marshal(retired)
		ann = string(b)
	}
	if mwc.Annotations[RetiredAnnotation] != ann {
		if ann == "" {
			delete(mwc.Annotations, RetiredAnnotation)
		} else {
			if mwc.Annotations == nil {
				mwc.Annotations = map[string]string{}
			}
			mwc.Annotations[RetiredAnnotation] = ann
		}
		changed = true
	}
	if changed {
		if err := p.Client.Update(ctx, &mwc); err != nil {
			return nil, fmt.Errorf("update caBundle of %s: %w", p.Registration, err)
		}
		log.Info("Updated the registration's caBundle", "registration", p.Registration, "cas", len(next), "retired", len(retired))
	}
	var added []*x509.Certificate
	for _, c := range ours {
		if !contains(inAll, c) {
			added = append(added, c)
		}
	}
	if len(mwc.Webhooks) > 0 {
		p.markTrusted(next, now)
		if hadTrust {
			// Added next to CAs API servers already use: they need time to pick it up.
			// Into an empty bundle (an install), nothing was being called anyway.
			p.markAdded(added, now)
		}
	}
	return added, nil
}

func fingerprint(c *x509.Certificate) string {
	s := sha256.Sum256(c.Raw)
	return hex.EncodeToString(s[:])
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
		// At least a second between passes, kicks included: another writer of the
		// bundle cannot make a tight loop of it.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		case <-time.After(wait - time.Second):
		}
	}
}

// addedAt is when this process added ca to the registration (ok false: it did not; it
// was there already, or there is no registration to keep).
func (p *Publisher) addedAt(ca []byte) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.added[sha256.Sum256(ca)]
	return t, ok
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
