package certs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-openapi/jsonpointer"
	"gomodules.xyz/jsonpatch/v2"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
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
	// since is, from the last read of the registration, when each CA it trusts (by
	// fingerprint) joined its bundle (see CAsAnnotation).
	since map[string]time.Time
	// absent: the registration did not exist at the last read (nothing calls the
	// webhook yet, so any CA may be served).
	absent bool
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

// trustedFor reports whether ca has been in the registration's bundle for the switch
// delay at now, and when it will have been. When ca joined is the time the registration
// records, shared by every replica: a pod that starts after another added a CA waits
// out the same delay. Without a registration to keep (or none yet: nothing calls the
// webhook), every CA counts as trusted.
func (p *Publisher) trustedFor(ca []byte, now time.Time) (bool, time.Time) {
	if p.Registration == "" {
		return true, now
	}
	p.mu.Lock()
	since, ok := p.since[fingerprintDER(ca)]
	absent := p.absent
	p.mu.Unlock()
	switch {
	case absent:
		return true, now
	case !ok:
		return false, now.Add(p.switchDelay())
	}
	at := since.Add(p.switchDelay())
	return !now.Before(at), at
}

// CAsAnnotation, on the registration, records for each CA of its caBundle (by hex
// SHA-256 of the certificate) when it joined the bundle, and, for a CA the certificate
// configstamp keeps no longer names, when it was first found so (JSON). Every replica
// reads and writes the same record, so they agree on when a new CA may be served
// (since + the switch delay) and when a retired one leaves (retired + the retention).
// A retired CA stays so that nothing still served loses trust: a replica serving the
// old CA's certificate until its switch, one that read an older Secret, the old pods of
// a certificate-mode switch.
const CAsAnnotation = "configstamp.io/cas"

// retention is how long a retired CA stays in the bundle: every replica has switched
// well within it.
func (p *Publisher) retention() time.Duration { return max(time.Hour, 3*p.switchDelay()) }

// publish makes every entry of the registration trust bundle, with the CAs it trusted
// that bundle no longer holds kept for a while, and records when each joined (see
// nextBundle). A registration that does not exist yet is no error: there is nothing to
// keep (its creation is watched). served is the CA of the certificate this process
// serves (nil: none yet). A registration changed between the read and the write (the
// patch's guards fail) is read again.
func (p *Publisher) publish(ctx context.Context, bundle []byte, now time.Time, served *x509.Certificate) error {
	if p.Registration == "" {
		return nil
	}
	return retry.OnError(retry.DefaultRetry, stale, func() error { return p.publishOnce(ctx, bundle, now, served) })
}

// stale reports whether a guarded patch failed because the object changed since it was
// read: a failed JSON-patch test op is a 422, a changed resourceVersion a conflict.
func stale(err error) bool { return apierrors.IsConflict(err) || apierrors.IsInvalid(err) }

func (p *Publisher) publishOnce(ctx context.Context, bundle []byte, now time.Time, served *x509.Certificate) error {
	log := logf.FromContext(ctx)
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := p.Client.Get(ctx, client.ObjectKey{Name: p.Registration}, &mwc); err != nil {
		if apierrors.IsNotFound(err) {
			p.setSince(nil, true)
			log.V(1).Info("No registration yet; its caBundle is filled when it appears", "registration", p.Registration)
			return nil
		}
		return fmt.Errorf("get registration %s: %w", p.Registration, err)
	}
	if len(mwc.Webhooks) == 0 {
		p.setSince(nil, true) // nothing calls the webhook through it
		return nil
	}
	in := bundleInput{record: mwc.Annotations[CAsAnnotation], known: p.knownSince(), want: bundle, served: served, now: now, retention: p.retention()}
	for _, w := range mwc.Webhooks {
		in.entries = append(in.entries, w.ClientConfig.CABundle)
	}
	next, states := nextBundle(in)
	if patch := bundlePatch(&mwc, pemCerts(next), states); patch != nil {
		raw, err := json.Marshal(patch)
		if err != nil {
			return err
		}
		if err := p.Client.Patch(ctx, &mwc, client.RawPatch(types.JSONPatchType, raw)); err != nil {
			return fmt.Errorf("patch caBundle of %s: %w", p.Registration, err)
		}
		log.Info("Updated the registration's caBundle", "registration", p.Registration, "cas", len(next))
	}
	since := map[string]time.Time{}
	for fp, st := range states {
		since[fp] = st.Since
	}
	p.setSince(since, false)
	return nil
}

// bundlePatch is the JSON patch that puts bundle into every entry of mwc and states into
// its record (nil: nothing to change). It touches only those fields, so registration
// fields this build does not know survive (a typed update would drop them, and the
// chart's self policy deny it); test ops on the resourceVersion and each entry's name
// make it fail if the registration changed since mwc was read.
func bundlePatch(mwc *admissionregistrationv1.MutatingWebhookConfiguration, bundle []byte, states map[string]caState) []jsonpatch.Operation {
	guards := []jsonpatch.Operation{jsonpatch.NewOperation("test", "/metadata/resourceVersion", mwc.ResourceVersion)}
	var ops []jsonpatch.Operation
	for i, w := range mwc.Webhooks {
		guards = append(guards, jsonpatch.NewOperation("test", fmt.Sprintf("/webhooks/%d/name", i), w.Name))
		if !bytes.Equal(w.ClientConfig.CABundle, bundle) {
			// add replaces a member that exists; []byte marshals as base64, as the API wants.
			ops = append(ops, jsonpatch.NewOperation("add", fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), bundle))
		}
	}
	ann, _ := json.Marshal(states) // map keys sorted: the same bytes for the same record
	// An earlier build's record.
	const oldRecord = "configstamp.io/retired-cas"
	if _, old := mwc.Annotations[oldRecord]; old {
		ops = append(ops, jsonpatch.NewOperation("remove", "/metadata/annotations/"+jsonpointer.Escape(oldRecord), nil))
	}
	switch {
	case mwc.Annotations[CAsAnnotation] == string(ann):
	case mwc.Annotations == nil:
		ops = append(ops, jsonpatch.NewOperation("add", "/metadata/annotations", map[string]string{CAsAnnotation: string(ann)}))
	default:
		ops = append(ops, jsonpatch.NewOperation("add", "/metadata/annotations/"+jsonpointer.Escape(CAsAnnotation), string(ann)))
	}
	if len(ops) == 0 {
		return nil
	}
	return append(guards, ops...)
}

// knownSince is when this process last knew each CA (by fingerprint) to have joined
// the bundle.
func (p *Publisher) knownSince() map[string]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.since)
}

func (p *Publisher) setSince(m map[string]time.Time, absent bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.since, p.absent = m, absent
}

func fingerprint(c *x509.Certificate) string { return fingerprintDER(c.Raw) }

func fingerprintDER(der []byte) string {
	s := sha256.Sum256(der)
	return hex.EncodeToString(s[:])
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

// ErrWaiting means nothing is served yet, and the certificate to serve is from a CA that
// has not been in the registration's bundle for the switch delay.
var ErrWaiting = errors.New("waiting for API servers to trust a new CA")

// serve puts data (tls.crt: leaf first, then any intermediates; tls.key; ca.crt) into
// dir, unless what dir serves still lasts and leaf's CA, root, has not been in the
// registration's bundle for the switch delay (or leaf is less than a minute old, for API
// servers whose clock is behind). Then it returns when to look again. With nothing
// served, a CA not trusted for the delay yet gives ErrWaiting; a served certificate about
// to end is replaced regardless.
func (p *Publisher) serve(ctx context.Context, dir string, data map[string][]byte, leaf, root *x509.Certificate, now time.Time) (time.Time, error) {
	served, err := os.ReadFile(filepath.Join(dir, CertName))
	if err == nil && bytes.Equal(served, data[CertName]) {
		return time.Time{}, nil
	}
	cur, _ := parsePair(served, readFile(filepath.Join(dir, KeyName)))
	curLasts := cur != nil && now.Add(p.switchDelay()).Before(cur.NotAfter)
	trusted, at := p.trustedFor(root.Raw, now)
	fresh := leaf.NotBefore.Add(time.Minute)
	switch {
	case curLasts && (!trusted || now.Before(fresh)):
		if trusted {
			at = fresh
		}
		logf.FromContext(ctx).V(1).Info("Waiting before serving a certificate from a CA new to the registration", "ca", root.Subject.CommonName, "at", at)
		return at, nil
	case cur == nil && !trusted:
		return at, fmt.Errorf("%w: %s, until %s", ErrWaiting, root.Subject.CommonName, at.Format(time.RFC3339))
	}
	if err := writeFiles(dir, data); err != nil {
		return time.Time{}, err
	}
	logf.FromContext(ctx).Info("Serving a new certificate", "ca", root.Subject.CommonName, "notAfter", leaf.NotAfter)
	return time.Time{}, nil
}

// servedCA is the CA of the certificate dir serves (nil: none, or none that verifies).
func servedCA(dir string, now time.Time) *x509.Certificate {
	return chainRoot(readFile(filepath.Join(dir, CertName)), parseCerts(readFile(filepath.Join(dir, CAName))), now)
}

func readFile(path string) []byte {
	b, _ := os.ReadFile(path)
	return b
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
