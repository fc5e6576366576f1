package certs

import (
	"bytes"
	"testing"
	"time"
)

func TestRotatorRenew(t *testing.T) {
	r := &Rotator{Hosts: []string{"configstamp.ns.svc", "127.0.0.1"}, Validity: 10 * time.Hour, RenewBefore: 3 * time.Hour, CAValidity: 30 * time.Hour}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

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

	// The CA would end before a new serving certificate: new CA, old one kept in the
	// bundle while valid, serving certificate from the new CA.
	rolled, _, changed, _ := r.renew(renewed, t0.Add(20*time.Hour+time.Second))
	if !changed {
		t.Fatal("CA not rolled over")
	}
	bundle := parseCerts(rolled[CAName])
	newCA, _ := parsePair(rolled[CAName], rolled[CAKeyName])
	newLeaf, _ := parsePair(rolled[CertName], rolled[KeyName])
	if len(bundle) != 2 || newCA == nil || newCA.Equal(ca) || !bundle[1].Equal(ca) || newLeaf.CheckSignatureFrom(newCA) != nil {
		t.Fatalf("CA rollover: bundle of %d, new leaf signed by new CA: %v", len(bundle), newLeaf.CheckSignatureFrom(newCA))
	}

	r.Hosts = []string{"other.ns.svc"}
	if _, _, changed, _ := r.renew(rolled, t0.Add(20*time.Hour+2*time.Second)); !changed {
		t.Fatal("not reissued for new hosts")
	}
}
