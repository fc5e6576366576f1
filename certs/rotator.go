package certs

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	// Publisher reads and writes the Secret (its Client) and keeps the registration.
	Publisher
	Secret types.NamespacedName
	// Hosts are the serving certificate's DNS names or IP addresses.
	Hosts   []string
	CertDir string
	// Validity and RenewBefore govern the serving certificate; the CA lives CAValidity
	// and is replaced when it would expire before a new serving certificate does.
	Validity, RenewBefore, CAValidity time.Duration
}

var _ manager.LeaderElectionRunnable = &Rotator{}

// NeedLeaderElection is false: every replica serves, so every replica needs the files.
func (r *Rotator) NeedLeaderElection() bool { return false }

// Start renews the certificate whenever it is due, and puts the registration's bundle
// back whenever it changes (with Watch), until ctx ends.
func (r *Rotator) Start(ctx context.Context) error {
	kick, err := r.watch(ctx, nil)
	if err != nil {
		return err
	}
	return loop(ctx, kick, 5*time.Minute, "ensure the self-signed certificate", r.Ensure)
}

// Ensure makes the Secret, the cert dir and the registration hold a valid certificate,
// and returns when it should next be renewed. Losing a write race to another replica
// makes it read again, and use the winner's certificate.
func (r *Rotator) Ensure(ctx context.Context) (time.Time, error) {
	var err error
	for range 5 {
		var next time.Time
		next, err = r.ensureOnce(ctx)
		if err == nil {
			return next, nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
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
	// Publish, then serve: a new CA is in the bundle before anything it signed is
	// served. renew switches the Secret to a new CA only once it is trusted; a fresh or
	// emptied Secret (helm upgrade --force) gets a new CA and its certificate in one
	// pass, and serve keeps what is served until the new CA is trusted for the delay.
	if err := r.publish(ctx, data[CAName], now, servedCA(r.CertDir, now)); err != nil {
		return time.Time{}, err
	}
	leaf, _ := parsePair(data[CertName], data[KeyName])
	root := chainRoot(data[CertName], parseCerts(data[CAName]), now)
	if leaf == nil || root == nil {
		return time.Time{}, fmt.Errorf("secret %s: no valid certificate after renewal", r.Secret)
	}
	next, err := r.serve(ctx, r.CertDir, data, leaf, root, now)
	if err != nil {
		return next, err
	}
	if !next.IsZero() {
		renewAt = minTime(renewAt, next)
	}
	return renewAt, nil
}
