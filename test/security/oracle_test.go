package security

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/hashkey"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/hashdoc"
	"github.com/configstamp/configstamp/test/internal/reviews"
)

// testOracle: the attacker holds the same ConfigMap (flags, pin 4711) as victim. A
// forged review for victim (in scope: configstamp stamps it, as it would the API
// server's) gives a config hash and a source digest; a real create in the attacker's
// own namespace gives others. None may match, and no value 0000-9999 hashed offline by
// docs/hash.md (test/hashdoc) without the installation's key may give victim's config
// hash: the digest of a single source is all that hash covers, so either match would
// give the pin away.
func (s *suite) testOracle(t *testing.T) {
	f := forged{reqNS: victim, objNS: victim, name: "forged", cms: []string{flags}}
	a := reviews.Post(s.hc, s.url, f.body())
	theirs, err := a.TemplateAnnotations()
	if err != nil {
		t.Fatal(err)
	}
	if theirs[stamp.HashAnnotation] == "" {
		t.Fatalf("a review for victim, in scope, is not stamped: %.300s", a.Body)
	}
	own := consumer(attacker, "app", []string{flags}, nil)
	create(t, own)
	mine := own.Spec.Template.Annotations
	if mine[stamp.HashAnnotation] == "" {
		t.Fatal("the attacker's own Deployment is not stamped")
	}
	t.Logf("victim (forged review): %s %s", theirs[stamp.HashAnnotation], theirs[stamp.SourcesAnnotation])
	t.Logf("attacker (real create): %s %s", mine[stamp.HashAnnotation], mine[stamp.SourcesAnnotation])
	if theirs[stamp.HashAnnotation] == mine[stamp.HashAnnotation] {
		t.Error("the same content gives victim and attacker the same config hash: comparing them tells the content")
	}
	digests := sourceDigests(mine[stamp.SourcesAnnotation])
	for src, d := range sourceDigests(theirs[stamp.SourcesAnnotation]) {
		if d != "missing" && digests[src] == d {
			t.Errorf("%s has the digest prefix %s in both namespaces: comparing them tells the content", src, d)
		}
	}

	if v, ok := offlineGuess(theirs[stamp.HashAnnotation], withoutKey); ok {
		t.Errorf("victim's pin recovered offline, without the key, from its config hash: %s", v)
	}
	// The offline search is sound: with the installation's key (which only configstamp
	// holds) it finds the pin in victim's config hash; so only the key keeps it out.
	var sec corev1.Secret
	if err := k8s.Get(bg, client.ObjectKey{Namespace: keyNS, Name: "hash-key"}, &sec); err != nil {
		t.Fatal(err)
	}
	withKey := func(v string) []string { return []string{pinHash(v, sec.Data[hashkey.DataKey], victim)} }
	if v, ok := offlineGuess(theirs[stamp.HashAnnotation], withKey); !ok || v != pin {
		t.Errorf("the offline search with the installation's key does not find %s in victim's config hash (found %q)", pin, v)
	}
}

// sourceDigests reads a configstamp.io/sources value: kind/name -> digest prefix.
func sourceDigests(v string) map[string]string {
	out := map[string]string{}
	for _, entry := range strings.Split(v, ",") {
		if src, d, ok := strings.Cut(entry, "="); ok {
			out[src] = d
		}
	}
	return out
}

// pinHash is the config hash docs/hash.md gives, under key for namespace, for a
// workload consuming flags holding pin v by envFrom.
func pinHash(v string, key []byte, namespace string) string {
	return hashdoc.Hash(pinSources, pinConfig(v), key, namespace)
}

var pinSources = []hashdoc.Source{{Name: flags, EnvOnly: true}}

func pinConfig(v string) func(string) *corev1.ConfigMap {
	return func(string) *corev1.ConfigMap { return &corev1.ConfigMap{Data: map[string]string{"pin": v}} }
}

// withoutKey are the config hashes of pin v anyone can compute without the key: the
// predecessor's unkeyed encoding (configstamp/v1), today's with unkeyed digests, and
// today's with an empty key.
func withoutKey(v string) []string {
	v1, _ := hashdoc.V1Hash(pinSources, pinConfig(v))
	return []string{v1, hashdoc.Unkeyed(pinSources, pinConfig(v)), pinHash(v, nil, victim), pinHash(v, nil, "")}
}

// offlineGuess tries every pin 0000-9999, hashed by guesses, against hash.
func offlineGuess(hash string, guesses func(v string) []string) (string, bool) {
	for n := range 10000 {
		v := fmt.Sprintf("%04d", n)
		if slices.Contains(guesses(v), hash) {
			return v, true
		}
	}
	return "", false
}
