package certs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// CAKeyName is the Secret key holding the CA's private key in self-signed mode.
const CAKeyName = "ca.key"

// DefaultCASwitchDelay is how long the registration must have trusted a new CA before
// configstamp serves a certificate it signed.
const DefaultCASwitchDelay = time.Minute

// Rotator is the self-signed certificate mode, for clusters without cert-manager: it
// keeps a CA and a serving certificate in a Secret, renews them before they expire,
// writes them into the webhook server's cert dir (controller-runtime's cert watcher
// reloads them) and keeps the registration's caBundle current. Every replica runs it;
// writes to the Secret use optimistic concurrency, and a replica that loses a race reads
// and uses the winner's certificate, so replicas agree on one.
//
// A new CA is published before anything it signed is served: the pass that makes it
// puts it first in the bundle (the old CA stays while valid) and keeps the serving
// certificate from the old CA; a later pass, once the registration has trusted the new
// CA for CASwitchDelay, issues the serving certificate from it. The registration's
// bundle never loses a newer CA to a pass that read an older Secret.
type Rotator struct {
	// Client reads and writes the Secret and the registration directly (no cache).
	Client client.Client
	// Watch, when set, watches the registration by name, so that a bundle wiped by a
	// replace (helm upgrade --force, kubectl replace) is put back within seconds.
	Watch  kubernetes.Interface
	Secret types.NamespacedName
	// Registration is the MutatingWebhookConfiguration whose caBundle is kept current;
	// empty: none.
	Registration string
	// Hosts are the serving certificate's DNS names or IP addresses.
	Hosts   []string
	CertDir string
	// Validity and RenewBefore govern the serving certificate; the CA lives CAValidity
	// and is replaced when it would expire before a new serving certificate does.
	Validity, RenewBefore, CAValidity time.Duration
	// CASwitchDelay: see DefaultCASwitchDelay (0: the default).
	CASwitchDelay time.Duration

	now func() time.Time

	mu sync.Mutex
	// trusted records when this process first saw the registration trust each CA
	// (by SHA-256 of its DER).
	trusted map[[32]byte]time.Time
}

var _ manager.LeaderElectionRunnable = &Rotator{}

// NeedLeaderElection is false: every replica serves, so every replica needs the files.
func (r *Rotator) NeedLeaderElection() bool { return false }

// Start renews the certificate whenever it is due, and puts the registration's bundle
// back whenever it changes (with Watch), until ctx ends.
func (r *Rotator) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("certs")
	kick := make(chan struct{}, 1)
	if r.Watch != nil && r.Registration != "" {
		if err := r.watchRegistration(ctx, kick); err != nil {
			return err
		}
	}
	for {
		next, err := r.Ensure(ctx)
		wait := time.Until(next)
		if err != nil {
			log.Error(err, "Failed to ensure the self-signed certificate; retrying")
			wait = 10 * time.Second
		}
		wait = min(max(wait, time.Second), 5*time.Minute)
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		case <-time.After(wait):
		}
	}
}

// errStale: the Secret read is older than what the registration already trusts.
var errStale = errors.New("the Secret read is older than the registration's caBundle")

// Ensure makes the Secret, the cert dir and the registration hold a valid certificate,
// and returns when it should next be renewed. Losing a write race to another replica,
// or reading a Secret older than the registration's bundle, makes it read again.
func (r *Rotator) Ensure(ctx context.Context) (time.Time, error) {
	var err error
	for range 5 {
		var next time.Time
		next, err = r.ensureOnce(ctx)
		if err == nil {
			return next, nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) && !errors.Is(err, errStale) {
			return time.Time{}, err
		}
		logf.FromContext(ctx).V(1).Info("Another replica wrote the certificate first; reading it", "reason", err.Error())
	}
	return time.Time{}, err
}

func (r *Rotator) ensureOnce(ctx context.Context) (time.Time, error) {
	now := r.clock()
	var secret corev1.Secret
	err := r.Client.Get(ctx, r.Secret, &secret)
	create := apierrors.IsNotFound(err)
	if err != nil && !create {
		return time.Time{}, fmt.Errorf("get secret %s: %w", r.Secret, err)
	}
	if create {
		secret = corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.Secret.Namespace, Name: r.Secret.Name}, Type: corev1.SecretTypeTLS}
	}
	data, renewAt, changed, err := r.renew(secret.Data, now)
	if err != nil {
		return time.Time{}, err
	}
	if changed {
		secret.Data = data
		if create {
			err = r.Client.Create(ctx, &secret)
		} else {
			err = r.Client.Update(ctx, &secret)
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("write secret %s: %w", r.Secret, err)
		}
		logf.FromContext(ctx).Info("Wrote the self-signed certificate", "secret", r.Secret.String(), "renewAt", renewAt)
	}
	if err := r.writeFiles(data); err != nil {
		return time.Time{}, err
	}
	if err := r.injectCA(ctx, data[CAName], now); err != nil {
		return time.Time{}, err
	}
	return renewAt, nil
}

func (r *Rotator) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

func (r *Rotator) switchDelay() time.Duration {
	if r.CASwitchDelay > 0 {
		return r.CASwitchDelay
	}
	return DefaultCASwitchDelay
}

// trustedSince is when this process first saw the registration trust ca (ok false: not
// yet). Without a registration to keep, every CA counts as trusted.
func (r *Rotator) trustedSince(ca []byte) (time.Time, bool) {
	if r.Registration == "" {
		return time.Time{}, true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.trusted[sha256.Sum256(ca)]
	return t, ok
}

func (r *Rotator) markTrusted(cas [][]byte, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.trusted == nil {
		r.trusted = map[[32]byte]time.Time{}
	}
	for _, der := range cas {
		k := sha256.Sum256(der)
		if _, ok := r.trusted[k]; !ok {
			r.trusted[k] = now
		}
	}
}

// writeFiles puts the certificate, key and CA into the cert dir when they differ,
// renaming new files into place so the cert watcher never reads half a file.
func (r *Rotator) writeFiles(data map[string][]byte) error {
	if err := os.MkdirAll(r.CertDir, 0o700); err != nil {
		return err
	}
	for _, name := range []string{KeyName, CertName, CAName} {
		path := filepath.Join(r.CertDir, name)
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
