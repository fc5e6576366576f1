package stamp

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestKeyDigestsNameChangedKeys(t *testing.T) {
	key := NamespaceKey([]byte("installation key"), "ns")
	src := Source{Kind: "secret", Name: "db", AllKeys: true, Binary: true}
	v1 := &corev1.ConfigMap{Data: map[string]string{"password": "hunter2", "user": "app", "gone": "x"}}
	v2 := &corev1.ConfigMap{Data: map[string]string{"password": "hunter3", "user": "app", "added": "y"}}
	stampOf := func(cm *corev1.ConfigMap) Stamp {
		d := SourceDigest(src, cm, key)
		d.Keys, d.KeysKnown = KeyDigests(src, cm, key)
		return Combine([]Digest{d})
	}
	s1, s2 := stampOf(v1), stampOf(v2)
	k1, k2 := KeysValue(s1, ""), KeysValue(s2, "")
	for _, v := range []string{k1, k2} {
		if strings.Contains(v, "hunter") || strings.Contains(v, "app,") {
			t.Fatalf("a value in the keys annotation: %q", v)
		}
	}
	was, now := ParseSources(s1.SourcesAnnotation())["secret/db"], ParseSources(s2.SourcesAnnotation())["secret/db"]
	names, known := ChangedKeys(k1, k2, "secret/db", was, now)
	if !known || !reflect.DeepEqual(names, []string{"added", "gone", "password"}) {
		t.Fatalf("ChangedKeys = %v, %v; want [added gone password], true", names, known)
	}
	cause := ChangeCause(Rollout{StoredHash: s1.Hash, StoredSources: s1.SourcesAnnotation(), StoredKeys: k1,
		Hash: s2.Hash, Sources: s2.SourcesAnnotation(), Keys: k2})
	if want := "; keys: added, gone, password)"; !strings.HasSuffix(cause, want) {
		t.Fatalf("cause %q does not end in %q", cause, want)
	}

	// Unknown: no keys before, or keys written for other content (its digest differs).
	if _, known := ChangedKeys("", k2, "secret/db", was, now); known {
		t.Fatal("known without keys before")
	}
	if _, known := ChangedKeys(k2, k2, "secret/db", was, now); known {
		t.Fatal("known from keys written for other content")
	}
	// A digest from the cache (content not read) keeps the stored entry of the same
	// digest, and drops one of other content.
	cached := s2
	cached.Sources = []Digest{{Kind: "secret", Name: "db", Sum: s2.Sources[0].Sum}}
	if got := KeysValue(cached, k2); got != k2 {
		t.Fatalf("KeysValue from cache = %q, want the stored %q", got, k2)
	}
	if got := KeysValue(cached, k1); got != "" {
		t.Fatalf("KeysValue from cache over other content = %q, want none", got)
	}
	// The same content in another namespace has other key digests (keyed per namespace).
	other := NamespaceKey([]byte("installation key"), "other")
	a, _ := KeyDigests(src, v1, other)
	if b, _ := KeyDigests(src, v1, key); a == b {
		t.Fatal("key digests do not depend on the namespace key")
	}
	// Only the selected keys.
	sel := Source{Kind: "configmap", Name: "c", Keys: []string{"user"}}
	if got, _ := KeyDigests(sel, v1, key); !strings.HasPrefix(got, "user=") || strings.Contains(got, ",") {
		t.Fatalf("selected keys: %q", got)
	}
}

func TestKeysValueOverBudget(t *testing.T) {
	key := NamespaceKey([]byte("k"), "ns")
	data := map[string]string{}
	for i := range 2000 {
		data[strings.Repeat("k", 10)+string(rune('a'+i%26))+strings.Repeat("x", i/26)] = "v"
	}
	src := Source{Kind: "configmap", Name: "big", AllKeys: true}
	cm := &corev1.ConfigMap{Data: data}
	d := SourceDigest(src, cm, key)
	d.Keys, d.KeysKnown = KeyDigests(src, cm, key)
	if d.KeysKnown {
		t.Fatalf("over budget, and known: %d bytes", len(d.Keys))
	}
	if got := KeysValue(Combine([]Digest{d}), ""); got != "" {
		t.Fatalf("over budget: %d bytes written", len(got))
	}
}
