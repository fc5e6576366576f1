package certs

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestRotatorRenew(t *testing.T) {
	r := &Rotator{Hosts: []string{"configstamp.ns.svc", "127.0.0.1"}, Validity: 10 * time.Hour, RenewBefore: 3 * time.Hour, CAValidity: 30 * time.Hour}

	data, renewAt, changed, err := r.renew(nil, t0)
	if err != nil || !changed {
		t.Fatalf("first issue: changed %v err %v", changed, err)
	}
	if !renewAt.Equal(t0.Add(7 * time.Hour)) {
		t.Fatalf("renew at %v, want validity - renewBefore = t0+7h", renewAt)
	}
	leaf, _ := parsePair(data[CertName], data[KeyName])
	ca, _ := parsePair(data[CAName], data[CAKeyName])
	if leaf == nil || ca == nil || leaf.CheckSignatureFrom(ca) != nil || !sameHosts(leaf, r.Hosts) {
		t.Fatal("issued certificate is not a valid pair signed by the CA for the hosts")
	}

	same, _, changed, _ := r.renew(data, t0.Add(6*time.Hour))
	if changed || !bytes.Equal(same[CertName], data[CertName]) {
		t.Fatal("renewed before it was due")
	}

	renewed, _, changed, _ := r.renew(data, t0.Add(7*time.Hour+time.Second))
	if !changed || bytes.Equal(renewed[CertName], data[CertName]) {
		t.Fatal("not renewed when due")
	}
	if !bytes.Equal(renewed[CAName], data[CAName]) {
		t.Fatal("the CA changed with a serving certificate renewal: the caBundle would churn")
	}

	r.Hosts = []string{"other.ns.svc"}
	if _, _, changed, _ := r.renew(renewed, t0.Add(7*time.Hour+2*time.Second)); !changed {
		t.Fatal("not reissued for new hosts")
	}
}

// TestRotatorCARollover: a new CA is published first (the serving certificate stays
// from the old CA), and the serving certificate switches only once the registration
// has trusted the new CA for the switch delay; the old CA leaves the bundle when it
// expires.
func TestRotatorCARollover(t *testing.T) {
	r := &Rotator{Publisher: Publisher{Registration: "configstamp", CASwitchDelay: time.Minute}, Hosts: []string{"configstamp.ns.svc"},
		Validity: 10 * time.Hour, RenewBefore: 3 * time.Hour, CAValidity: 30 * time.Hour}
	data, _, _, err := r.renew(nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	oldCA, _ := parsePair(data[CAName], data[CAKeyName])
	r.markTrusted([]*x509.Certificate{oldCA}, t0)
	// A serving certificate issued at t0+15h (valid to t0+25h).
	if data, _, _, err = r.renew(data, t0.Add(15*time.Hour)); err != nil {
		t.Fatal(err)
	}

	// The CA would end before a new serving certificate (t0+30h-10h).
	at := t0.Add(20*time.Hour + time.Second)
	rolled, next, changed, err := r.renew(data, at)
	if err != nil || !changed {
		t.Fatalf("CA not rolled over: %v", err)
	}
	bundle := parseCerts(rolled[CAName])
	newCA, _ := parsePair(rolled[CAName], rolled[CAKeyName])
	if len(bundle) != 2 || newCA == nil || newCA.Equal(oldCA) || !bundle[1].Equal(oldCA) {
		t.Fatalf("bundle of %d, want the new CA then the old one", len(bundle))
	}
	if !bytes.Equal(rolled[CertName], data[CertName]) || !bytes.Equal(rolled[KeyName], data[KeyName]) {
		t.Fatal("the serving certificate changed in the pass that made the CA: served before the bundle trusts it")
	}
	if !next.After(at) || next.After(at.Add(time.Minute)) {
		t.Fatalf("next pass at %v, want within the switch delay", next)
	}

	// Not yet trusted by the registration: no switch, however long.
	if again, _, changed, _ := r.renew(rolled, at.Add(2*time.Minute)); changed || !bytes.Equal(again[CertName], data[CertName]) {
		t.Fatal("switched to a CA the registration has not trusted")
	}
	r.markTrusted([]*x509.Certificate{newCA, oldCA}, at.Add(2*time.Minute))
	if again, _, changed, _ := r.renew(rolled, at.Add(2*time.Minute+59*time.Second)); changed || !bytes.Equal(again[CertName], data[CertName]) {
		t.Fatal("switched before the registration trusted the new CA for the switch delay")
	}
	switched, _, changed, _ := r.renew(rolled, at.Add(3*time.Minute+time.Second))
	leaf, _ := parsePair(switched[CertName], switched[KeyName])
	if !changed || leaf == nil || leaf.CheckSignatureFrom(newCA) != nil {
		t.Fatal("serving certificate not switched to the new CA after the switch delay")
	}
	if !bytes.Equal(switched[CAName], rolled[CAName]) {
		t.Fatal("the bundle changed with the switch")
	}

	// The old CA expires (t0+30h): it leaves the bundle.
	pruned, _, changed, _ := r.renew(switched, t0.Add(30*time.Hour+time.Second))
	if got := parseCerts(pruned[CAName]); !changed || len(got) != 1 || !got[0].Equal(newCA) {
		t.Fatalf("bundle after the old CA expired: %d certificates, want the new CA alone", len(got))
	}
}

// TestRotatorSwitchesWhenServingCertEnds: a serving certificate about to end is
// replaced from the new CA even if the switch delay has not passed.
func TestRotatorSwitchesWhenServingCertEnds(t *testing.T) {
	r := &Rotator{Publisher: Publisher{Registration: "configstamp", CASwitchDelay: time.Hour}, Hosts: []string{"h"},
		Validity: 10 * time.Hour, RenewBefore: 3 * time.Hour, CAValidity: 30 * time.Hour}
	data, _, _, _ := r.renew(nil, t0)
	// Issued at t0+15h, ends at t0+25h; the CA rolls at t0+20h.
	renewedAt := t0.Add(15 * time.Hour)
	data, _, _, _ = r.renew(data, renewedAt)
	rolled, _, _, _ := r.renew(data, t0.Add(20*time.Hour+time.Second))
	newCA, _ := parsePair(rolled[CAName], rolled[CAKeyName])
	out, _, changed, _ := r.renew(rolled, t0.Add(24*time.Hour+30*time.Minute))
	leaf, _ := parsePair(out[CertName], out[KeyName])
	if !changed || leaf.CheckSignatureFrom(newCA) != nil {
		t.Fatal("a serving certificate 30 minutes from its end was kept for a switch delay of an hour")
	}
}

func newFakeRotator(t *testing.T, c client.Client) *Rotator {
	return &Rotator{Publisher: Publisher{Client: c, Registration: "configstamp", now: func() time.Time { return t0 }},
		Secret: types.NamespacedName{Namespace: "ns", Name: "tls"}, Hosts: []string{"h"}, CertDir: t.TempDir(),
		Validity: 10 * time.Hour, RenewBefore: 3 * time.Hour, CAValidity: 30 * time.Hour}
}

func registration() *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "configstamp"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "a.configstamp.io"}, {Name: "b.configstamp.io"}}}
}

// TestEnsureLosesRaceToAnotherReplica: two replicas find the empty Secret; the other
// one writes first, this one's write conflicts; it reads and serves the winner's
// certificate instead of failing.
func TestEnsureLosesRaceToAnotherReplica(t *testing.T) {
	empty := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "tls"}, Type: corev1.SecretTypeOpaque}
	base := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(empty, registration()).Build()
	winner := newFakeRotator(t, base)
	raced := false
	c := interceptor.NewClient(base.(client.WithWatch), interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if _, ok := obj.(*corev1.Secret); ok && !raced {
				raced = true
				// The other replica's pass lands between this one's read and write.
				if _, err := winner.Ensure(ctx); err != nil {
					return err
				}
			}
			return c.Update(ctx, obj, opts...)
		},
	})
	loser := newFakeRotator(t, c)
	if _, err := loser.Ensure(context.Background()); err != nil {
		t.Fatalf("the replica that lost the race failed: %v", err)
	}
	if !raced {
		t.Fatal("no race happened")
	}
	var s corev1.Secret
	if err := base.Get(context.Background(), loser.Secret, &s); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{winner.CertDir, loser.CertDir} {
		served, err := os.ReadFile(filepath.Join(dir, CertName))
		if err != nil || !bytes.Equal(served, s.Data[CertName]) {
			t.Fatalf("%s does not serve the Secret's certificate (%v)", dir, err)
		}
	}
	var reg admissionregistrationv1.MutatingWebhookConfiguration
	_ = base.Get(context.Background(), client.ObjectKey{Name: "configstamp"}, &reg)
	for _, w := range reg.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, s.Data[CAName]) {
			t.Fatalf("entry %s does not trust the Secret's CA", w.Name)
		}
	}
}

// TestPublishKeepsRetiredCAs: a CA the registration trusts that this pass's Secret
// does not name (another replica's newer CA read by a replica with an older Secret, the
// other certificate mode's after a switch) is kept, marked retired, for the retention,
// then dropped; every pass computes the same, so replicas never undo each other.
func TestPublishKeepsRetiredCAs(t *testing.T) {
	ctx := context.Background()
	reg := registration()
	base := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(reg).Build()
	r := newFakeRotator(t, base)
	old, _, _, _ := r.renew(nil, t0)
	newer, _, _, _ := r.renew(nil, t0.Add(time.Hour)) // another replica's later CA
	bundle := func() ([]*x509.Certificate, string) {
		_ = base.Get(ctx, client.ObjectKeyFromObject(reg), reg)
		return parseCerts(reg.Webhooks[1].ClientConfig.CABundle), reg.Annotations[RetiredAnnotation]
	}
	if _, err := r.publish(ctx, newer[CAName], t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	newCA := parseCerts(newer[CAName])[0]
	oldCA := parseCerts(old[CAName])[0]
	// A pass holding the older Secret: the newer CA stays.
	if _, err := r.publish(ctx, old[CAName], t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, ann := bundle()
	if len(got) != 2 || !contains(got, newCA) || !contains(got, oldCA) || !strings.Contains(ann, fingerprint(newCA)) {
		t.Fatalf("after a pass with an older Secret: %d CAs, retired %s; want both, the newer retired", len(got), ann)
	}
	// Again, later: same bundle (the retirement keeps its first time).
	if _, err := r.publish(ctx, old[CAName], t0.Add(time.Hour+30*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got2, ann2 := bundle(); len(got2) != 2 || ann2 != ann {
		t.Fatalf("retirement moved: %s -> %s", ann, ann2)
	}
	// Past the retention: dropped.
	if _, err := r.publish(ctx, old[CAName], t0.Add(2*time.Hour+time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, ann := bundle(); len(got) != 1 || !got[0].Equal(oldCA) || ann != "" {
		t.Fatalf("after the retention: %d CAs, retired %q; want the Secret's alone", len(got), ann)
	}
	// Named again by the Secret: trusted, not retired.
	added, err := r.publish(ctx, pemCerts([]*x509.Certificate{newCA, oldCA}), t0.Add(3*time.Hour))
	if err != nil || len(added) != 1 || !added[0].Equal(newCA) {
		t.Fatalf("added %d (%v), want the newer CA", len(added), err)
	}
	if got, ann := bundle(); len(got) != 2 || ann != "" {
		t.Fatalf("%d CAs, retired %q", len(got), ann)
	}
}

// TestPublishWithoutRegistration: a registration not created yet is no error (the
// chart may create it after the pod starts); nothing counts as trusted.
func TestPublishWithoutRegistration(t *testing.T) {
	base := fake.NewClientBuilder().WithScheme(scheme.Scheme).Build()
	r := newFakeRotator(t, base)
	data, _, _, _ := r.renew(nil, t0)
	if _, err := r.Ensure(context.Background()); err != nil {
		t.Fatalf("Ensure without a registration: %v", err)
	}
	if _, ok := r.trustedSince(parseCerts(data[CAName])[0].Raw); ok {
		t.Fatal("a CA counted as trusted by a registration that does not exist")
	}
}

// TestEnsureGivesUpOnOtherErrors: an error that is not a lost race is returned.
func TestEnsureGivesUpOnOtherErrors(t *testing.T) {
	base := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(registration()).Build()
	calls := 0
	c := interceptor.NewClient(base.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Secret); ok {
				calls++
				return apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, key.Name, errors.New("no"))
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	if _, err := newFakeRotator(t, c).Ensure(context.Background()); !apierrors.IsForbidden(err) || calls != 1 {
		t.Fatalf("err %v after %d reads, want Forbidden after 1", err, calls)
	}
}
