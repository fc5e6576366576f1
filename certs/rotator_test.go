package certs

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
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
	r.setSince(map[string]time.Time{fingerprint(oldCA): t0}, false)
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
	r.setSince(map[string]time.Time{fingerprint(newCA): at.Add(2 * time.Minute), fingerprint(oldCA): t0}, false)
	if again, _, changed, _ := r.renew(rolled, at.Add(2*time.Minute+59*time.Second)); changed || !bytes.Equal(again[CertName], data[CertName]) {
		t.Fatal("switched before the registration trusted the new CA for the switch delay")
	}
	switched, _, changed, _ := r.renew(rolled, at.Add(3*time.Minute+time.Second))
	leaf, _ := parsePair(switched[CertName], switched[KeyName])
	if !changed || leaf == nil || leaf.CheckSignatureFrom(newCA) != nil {
		t.Fatal("serving certificate not switched to the new CA after the switch delay")
	}
	if got := parseCerts(switched[CAName]); len(got) != 1 || !got[0].Equal(newCA) {
		t.Fatalf("the Secret's bundle after the switch: %d CAs, want the new CA alone (the registration keeps the old one, retired)", len(got))
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
	c := interceptor.NewClient(base, interceptor.Funcs{
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
// then dropped; replicas with the same inputs write the same bytes, and when each CA
// joined is recorded on the registration, for every replica.
func TestPublishKeepsRetiredCAs(t *testing.T) {
	ctx := context.Background()
	reg := registration()
	base := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(reg).Build()
	r := newFakeRotator(t, base)
	old, _, _, _ := r.renew(nil, t0)
	newer, _, _, _ := r.renew(nil, t0.Add(time.Hour)) // another replica's later CA
	oldCA, newCA := parseCerts(old[CAName])[0], parseCerts(newer[CAName])[0]
	state := func() ([]*x509.Certificate, map[string]caState) {
		_ = base.Get(ctx, client.ObjectKeyFromObject(reg), reg)
		st := map[string]caState{}
		_ = json.Unmarshal([]byte(reg.Annotations[CAsAnnotation]), &st)
		return parseCerts(reg.Webhooks[1].ClientConfig.CABundle), st
	}
	// Into an empty bundle (an install): trusted from the start.
	if err := r.publish(ctx, old[CAName], t0, nil); err != nil {
		t.Fatal(err)
	}
	if ok, _ := r.trustedFor(oldCA.Raw, t0); !ok {
		t.Fatal("the first CA of an install must not wait")
	}
	// Another replica adds the newer CA beside it: joined now, shared.
	other := newFakeRotator(t, base)
	if err := other.publish(ctx, pemCerts([]*x509.Certificate{newCA, oldCA}), t0.Add(time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	_, st := state()
	if !st[fingerprint(newCA)].Since.Equal(t0.Add(time.Hour)) {
		t.Fatalf("the newer CA's join time %v, want t0+1h", st[fingerprint(newCA)].Since)
	}
	// This replica, with the older Secret, keeps the newer CA (retired) and learns when
	// it joined.
	if err := r.publish(ctx, old[CAName], t0.Add(time.Hour+time.Second), nil); err != nil {
		t.Fatal(err)
	}
	got, st := state()
	if len(got) != 2 || !contains(got, newCA) || st[fingerprint(newCA)].Retired == nil {
		t.Fatalf("after a pass with an older Secret: %d CAs, state %+v; want both, the newer retired", len(got), st)
	}
	if ok, at := r.trustedFor(newCA.Raw, t0.Add(time.Hour+time.Second)); ok || !at.Equal(t0.Add(time.Hour+DefaultCASwitchDelay)) {
		t.Fatalf("trusted %v until %v: want the shared join time plus the delay", ok, at)
	}
	// Past the retention: dropped.
	if err := r.publish(ctx, old[CAName], t0.Add(2*time.Hour+2*time.Second), nil); err != nil {
		t.Fatal(err)
	}
	if got, st := state(); len(got) != 1 || !got[0].Equal(oldCA) || len(st) != 1 {
		t.Fatalf("after the retention: %d CAs, state %+v; want the Secret's alone", len(got), st)
	}
	// Back again: joins anew (not trusted since its first appearance).
	if err := r.publish(ctx, pemCerts([]*x509.Certificate{newCA, oldCA}), t0.Add(3*time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	if _, st := state(); !st[fingerprint(newCA)].Since.Equal(t0.Add(3*time.Hour)) || st[fingerprint(newCA)].Retired != nil {
		t.Fatalf("re-added CA: %+v, want joined at t0+3h, not retired", st[fingerprint(newCA)])
	}
	// Two writers with the same inputs write the same bytes (no ping-pong).
	before := reg.ResourceVersion
	for _, w := range []*Rotator{r, other, r} {
		if err := w.publish(ctx, pemCerts([]*x509.Certificate{oldCA, newCA}), t0.Add(3*time.Hour+time.Minute), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _ = base.Get(ctx, client.ObjectKeyFromObject(reg), reg); reg.ResourceVersion != before {
		t.Fatal("writers with the same inputs rewrote the registration")
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
	if _, err := os.Stat(filepath.Join(r.CertDir, CertName)); err != nil {
		t.Fatal("nothing served without a registration (nothing calls it yet: serve at once)")
	}
	_ = data
}

// TestEnsureGivesUpOnOtherErrors: an error that is not a lost race is returned.
func TestEnsureGivesUpOnOtherErrors(t *testing.T) {
	base := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(registration()).Build()
	calls := 0
	c := interceptor.NewClient(base, interceptor.Funcs{
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

// TestRotatorEmptiedSecretKeepsServing: a Secret emptied under running replicas (helm
// upgrade --force replaces it with the chart's empty manifest) gets a new CA and
// certificate at once, but what replicas serve switches only once the registration has
// trusted the new CA for the switch delay; a replica starting meanwhile waits.
func TestRotatorEmptiedSecretKeepsServing(t *testing.T) {
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "tls"}, Type: corev1.SecretTypeOpaque}
	base := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(secret, registration()).Build()
	now := t0
	clock := func() time.Time { return now }
	r := newFakeRotator(t, base)
	r.now = clock
	if _, err := r.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(filepath.Join(r.CertDir, CertName))

	// helm upgrade --force: the Secret and the registration replaced by the chart's
	// manifests, no data, no caBundle, no annotations.
	now = t0.Add(time.Hour)
	_ = base.Get(ctx, r.Secret, secret)
	secret.Data = nil
	if err := base.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	var reg admissionregistrationv1.MutatingWebhookConfiguration
	_ = base.Get(ctx, client.ObjectKey{Name: "configstamp"}, &reg)
	oldCA := parseCerts(reg.Webhooks[0].ClientConfig.CABundle)[0]
	reg.Annotations = nil
	for i := range reg.Webhooks {
		reg.Webhooks[i].ClientConfig.CABundle = nil
	}
	if err := base.Update(ctx, &reg); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if served, _ := os.ReadFile(filepath.Join(r.CertDir, CertName)); !bytes.Equal(served, first) {
		t.Fatal("served a certificate from a CA the registration had only just trusted")
	}
	_ = base.Get(ctx, client.ObjectKey{Name: "configstamp"}, &reg)
	if got := parseCerts(reg.Webhooks[0].ClientConfig.CABundle); len(got) != 2 || !contains(got, oldCA) {
		t.Fatalf("after the replace the bundle has %d CAs: want the served CA kept beside the new one", len(got))
	}
	starting := newFakeRotator(t, base)
	starting.now = clock
	if _, err := starting.Ensure(ctx); !errors.Is(err, ErrWaiting) {
		t.Fatalf("a replica starting within the switch delay: %v, want ErrWaiting", err)
	}
	now = now.Add(DefaultCASwitchDelay + time.Second)
	if _, err := r.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	_ = base.Get(ctx, r.Secret, secret)
	if served, _ := os.ReadFile(filepath.Join(r.CertDir, CertName)); !bytes.Equal(served, secret.Data[CertName]) {
		t.Fatal("not switched to the new CA's certificate after the switch delay")
	}
}

// TestTrustRecordSurvivesEditsAndSkew: the record of when a CA joined is floored by what
// this process knew (a lost or edited annotation does not make a new CA trusted at
// once), capped at now (a time ahead does not hang pods), and writers whose Secrets
// disagree settle instead of rewriting the registration on every pass.
func TestTrustRecordSurvivesEditsAndSkew(t *testing.T) {
	ctx := context.Background()
	base := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(registration()).Build()
	r := newFakeRotator(t, base)
	a, _, _, _ := r.renew(nil, t0)
	b, _, _, _ := r.renew(nil, t0.Add(time.Hour))
	caA, caB := parseCerts(a[CAName])[0], parseCerts(b[CAName])[0]
	if err := r.publish(ctx, a[CAName], t0, nil); err != nil {
		t.Fatal(err)
	}
	joined := t0.Add(time.Hour)
	if err := r.publish(ctx, pemCerts([]*x509.Certificate{caB, caA}), joined, nil); err != nil {
		t.Fatal(err)
	}
	edit := func(f func(map[string]caState)) {
		var reg admissionregistrationv1.MutatingWebhookConfiguration
		_ = base.Get(ctx, client.ObjectKey{Name: "configstamp"}, &reg)
		st := map[string]caState{}
		_ = json.Unmarshal([]byte(reg.Annotations[CAsAnnotation]), &st)
		f(st)
		raw, _ := json.Marshal(st)
		reg.Annotations[CAsAnnotation] = string(raw)
		if len(st) == 0 {
			delete(reg.Annotations, CAsAnnotation)
		}
		if err := base.Update(ctx, &reg); err != nil {
			t.Fatal(err)
		}
	}
	// The record lost 10 s later: still not trusted before joined + the delay.
	edit(func(st map[string]caState) { clear(st) })
	if err := r.publish(ctx, pemCerts([]*x509.Certificate{caB, caA}), joined.Add(10*time.Second), nil); err != nil {
		t.Fatal(err)
	}
	if ok, at := r.trustedFor(caB.Raw, joined.Add(10*time.Second)); ok || !at.Equal(joined.Add(DefaultCASwitchDelay)) {
		t.Fatalf("after the record was lost: trusted %v until %v, want until %v", ok, at, joined.Add(DefaultCASwitchDelay))
	}
	// A join time a year ahead: counts as now, so the wait ends.
	edit(func(st map[string]caState) { st[fingerprint(caB)] = caState{Since: joined.Add(365 * 24 * time.Hour)} })
	fresh := newFakeRotator(t, base)
	at := joined.Add(20 * time.Second)
	if err := fresh.publish(ctx, pemCerts([]*x509.Certificate{caB, caA}), at, nil); err != nil {
		t.Fatal(err)
	}
	if _, until := fresh.trustedFor(caB.Raw, at); until.After(at.Add(DefaultCASwitchDelay)) {
		t.Fatalf("a join time ahead of the clock: trusted only at %v", until)
	}
	// Two writers, one naming A only, one naming B only: a few writes, then none.
	other := newFakeRotator(t, base)
	var reg admissionregistrationv1.MutatingWebhookConfiguration
	writes := 0
	for i := range 10 {
		w, bundle := r, a[CAName]
		if i%2 == 1 {
			w, bundle = other, b[CAName]
		}
		_ = base.Get(ctx, client.ObjectKey{Name: "configstamp"}, &reg)
		rv := reg.ResourceVersion
		if err := w.publish(ctx, bundle, at.Add(time.Duration(i)*time.Second), nil); err != nil {
			t.Fatal(err)
		}
		_ = base.Get(ctx, client.ObjectKey{Name: "configstamp"}, &reg)
		if reg.ResourceVersion != rv {
			writes++
		}
	}
	if writes > 3 {
		t.Fatalf("two writers with different Secrets wrote %d times in 10 passes", writes)
	}
}
