package certs

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// injectCA makes every entry of the registration trust bundle, unless the registration
// already trusts a CA newer than any in bundle (then this pass read an older Secret than
// another replica wrote: errStale, read again). It records which CAs the registration
// trusts from now on.
func (r *Rotator) injectCA(ctx context.Context, bundle []byte, now time.Time) error {
	if r.Registration == "" {
		return nil
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := r.Client.Get(ctx, client.ObjectKey{Name: r.Registration}, &mwc); err != nil {
		return fmt.Errorf("get registration %s: %w", r.Registration, err)
	}
	ours := parseCerts(bundle)
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
				return fmt.Errorf("%w: registration %s trusts %s (from %s)", errStale, r.Registration, c.Subject.CommonName, c.NotBefore.Format(time.RFC3339))
			}
		}
		mwc.Webhooks[i].ClientConfig.CABundle = bundle
		changed = true
	}
	if changed {
		if err := r.Client.Update(ctx, &mwc); err != nil {
			return fmt.Errorf("update caBundle of %s: %w", r.Registration, err)
		}
		logf.FromContext(ctx).Info("Updated the registration's caBundle", "registration", r.Registration, "cas", len(ours))
	}
	if len(mwc.Webhooks) > 0 {
		der := make([][]byte, len(ours))
		for i, c := range ours {
			der[i] = c.Raw
		}
		r.markTrusted(der, now)
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

// watchRegistration sends on kick whenever the registration is created or changes, so
// that a replace that drops the caBundle is repaired at once. It lists and watches the
// one object by name (RBAC resourceNames allow that with the metadata.name selector).
func (r *Rotator) watchRegistration(ctx context.Context, kick chan<- struct{}) error {
	byName := fields.OneTermEqualSelector("metadata.name", r.Registration).String()
	lw := toolscache.NewFilteredListWatchFromClient(r.Watch.AdmissionregistrationV1().RESTClient(), "mutatingwebhookconfigurations", metav1.NamespaceAll,
		func(o *metav1.ListOptions) { o.FieldSelector = byName })
	inf := toolscache.NewSharedIndexInformer(lw, &admissionregistrationv1.MutatingWebhookConfiguration{}, 0, toolscache.Indexers{})
	send := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { send() },
		UpdateFunc: func(any, any) { send() },
	}); err != nil {
		return err
	}
	go inf.RunWithContext(ctx)
	return nil
}
