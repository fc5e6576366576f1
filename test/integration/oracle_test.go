package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/hashdoc"
	"github.com/configstamp/configstamp/test/internal/reviews"
)

// TestOracleClosed: a digest configstamp hands out teaches nothing about content in a
// namespace its receiver cannot read. A ConfigMap pin: "4711" in namespace victim, the
// same ConfigMap in namespace attacker; a Deployment of the attacker's own, created
// through the API server, and a review for victim posted straight to the webhook port
// (as an attacker's pod would) give config-hashes and per-source digests that do not
// match; and no digest computed offline from the content without configstamp's key (the
// documented encoding, old and new, for "4711" and every value 0000-9999) matches the
// one returned for victim.
func TestOracleClosed(t *testing.T) {
	cs := env.Start(t, framework.Options{})
	const cmName, pinKey, secret = "feature-flags", "pin", "4711"
	for _, ns := range []string{"victim", "attacker"} {
		env.CreateNamespace(t, ns, true)
		cm := configMap(ns, cmName, map[string]string{pinKey: secret})
		if err := k8s.Create(bg, cm); err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatal(err)
		}
	}
	spec := podWithVolumes(cmName)

	// The attacker's own Deployment, admitted for real.
	d := getDeployment(t, "attacker", createDeployment(t, "attacker", "probe", spec).Name)
	own := stamp.ParseSources(d.Spec.Template.Annotations[stamp.SourcesAnnotation])
	ownHash := d.Spec.Template.Annotations[stamp.HashAnnotation]

	// A review for victim, posted to the webhook port.
	victim := deployment("forged", spec)
	victim.Namespace = "victim"
	hash, srcs := forgedReview(t, cs, "victim", victim)
	if hash == "" {
		t.Fatal("the forged review got no stamp: the test shows nothing (is victim in scope?)")
	}
	if ownHash == "" {
		t.Fatal("the attacker's Deployment was not stamped")
	}
	forged := stamp.ParseSources(srcs)
	id := stamp.KindConfigMap + "/" + cmName
	t.Logf("attacker (real admission): %s %s=%s; victim (forged review): %s %s=%s", ownHash, id, own[id], hash, id, forged[id])
	if hash == ownHash || forged[id] == own[id] {
		t.Errorf("the same content in two namespaces gives comparable digests: attacker %s %s, victim %s %s", ownHash, own[id], hash, forged[id])
	}

	// Offline guesses without the key: the documented encodings with no key, or an
	// empty one, for every four-digit value.
	guesses := 0
	matched := 0
	for i := range 10000 {
		v := fmt.Sprintf("%04d", i)
		get := func(string) *corev1.ConfigMap { return configMap("victim", cmName, map[string]string{pinKey: v}) }
		doc := []hashdoc.Source{{Name: cmName}}
		v1, v1Digests := hashdoc.V1Hash(doc, get)
		candidates := append([]string{v1, hashdoc.Hash(doc, get, nil, "victim"), hashdoc.Hash(doc, get, []byte{}, "")}, v1Digests...)
		for _, c := range candidates {
			guesses++
			if c == hash || strings.HasPrefix(c, forged[id]) {
				t.Errorf("the offline guess %q (no key) matches the digest the forged review returned (%s %s=%s)", v, hash, id, forged[id])
				matched++
			}
		}
	}
	t.Logf("%d offline guesses, %d matched", guesses, matched)
}

// forgedReview posts a CREATE review of d in namespace ns straight to the webhook port,
// as any pod that reaches it could, and returns the config-hash and sources the answer
// carries (its audit annotations).
func forgedReview(t *testing.T, cs *framework.Configstamp, ns string, d client.Object) (hash, sources string) {
	t.Helper()
	raw, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := reviews.Client(bg, k8s, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a := reviews.Post(hc, reviews.URL(cs.WebhookPort), reviews.Deployment("oracle", ns, d.GetName(), raw))
	r := a.Response()
	if r == nil {
		t.Fatalf("answer %d %s: %v", a.Code, a.Body, a.Err)
	}
	return r.AuditAnnotations["config-hash"], r.AuditAnnotations["sources"]
}
