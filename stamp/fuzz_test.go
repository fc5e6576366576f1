package stamp

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// FuzzConsumed runs reference discovery over arbitrary pod specs (and extra-sources
// annotations): no panic; the sources sorted by (kind, name) and unique, as the hash
// encoding requires (docs/hash.md); the key lists sorted and unique.
func FuzzConsumed(f *testing.F) {
	for _, spec := range []*corev1.PodSpec{secretSpec(), {
		Volumes:    []corev1.Volume{cmVolume("a", "k2", "k1", "k1"), cmVolume("b"), cmVolume("")},
		Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{keyRef("K", "a", "k0"), keyRef("L", "B", "x")}}},
	}} {
		b, err := json.Marshal(spec)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "configmap/a, secret/tls, configmap/z", true)
		f.Add(b, "", false)
	}
	f.Add([]byte(`{"initContainers":[{"envFrom":[{"configMapRef":{"name":"a","optional":true}},{"secretRef":{"name":"a"}}]}],"containers":[{"env":[{"valueFrom":{"configMapKeyRef":{"name":"a","key":""}}}]}]}`), "configmap/a,configmap/a", true)
	f.Add([]byte(`{"volumes":[{"projected":{"sources":[{"configMap":{"name":"p","items":[{"key":"b"},{"key":"a"}]}},{"secret":{"name":"p","optional":false}}]}}]}`), "secret/p", false)
	f.Add([]byte(`{"containers":[{"envFrom":[{"configMapRef":{"name":"a"}},{"configMapRef":{"name":"a","optional":true}},{"prefix":"X_","configMapRef":{"name":"a"}}]},{"envFrom":[{"configMapRef":{"name":"a"}},{"secretRef":{"name":"a","optional":true}}]},{"envFrom":[{"configMapRef":{"name":"a","optional":true}}]}]}`), "", true)
	f.Add([]byte(`null`), "configmap/", true)
	f.Fuzz(func(t *testing.T, raw []byte, extra string, secrets bool) {
		var spec corev1.PodSpec
		if json.Unmarshal(raw, &spec) != nil {
			return
		}
		var ann map[string]string
		if extra != "" {
			ann = map[string]string{ExtraSourcesAnnotation: extra}
		}
		got := Consumed(ann, &spec, Options{Secrets: secrets})
		checkSources(t, got, secrets)
		refs := References(&spec)
		checkSources(t, refs, false)
		if again := References(&spec); !reflect.DeepEqual(refs, again) {
			t.Fatalf("References is not deterministic: %#v, then %#v", refs, again)
		}
		// The watcher's cache keeps ReferencesOnly of a template: Consumed reads it alike.
		only := ReferencesOnly(&spec)
		if trimmed := Consumed(ann, &only, Options{Secrets: secrets}); !reflect.DeepEqual(trimmed, got) {
			t.Fatalf("Consumed of ReferencesOnly %#v, of the whole spec %#v", trimmed, got)
		}
	})
}

func checkSources(t *testing.T, got []Source, secrets bool) {
	t.Helper()
	for i, s := range got {
		if i > 0 && compareSources(got[i-1], s) >= 0 {
			t.Fatalf("sources not sorted by (kind, name) and unique: %s before %s", got[i-1].ID(), s.ID())
		}
		if i > 0 && (got[i-1].Kind > s.Kind || (got[i-1].Kind == s.Kind && got[i-1].Name >= s.Name)) {
			t.Fatalf("sources not in bytewise (kind, name) order: %s before %s", got[i-1].ID(), s.ID())
		}
		if s.Name == "" || (s.Kind != KindConfigMap && s.Kind != KindSecret) || (s.Kind == KindSecret && !secrets) {
			t.Fatalf("unexpected source %#v (secrets %v)", s, secrets)
		}
		if s.AllKeys && s.Keys != nil {
			t.Fatalf("%s sees all keys but lists %q", s.ID(), s.Keys)
		}
		for name, keys := range map[string][]string{"Keys": s.Keys, "RequiredKeys": s.RequiredKeys, "RequiredEnvKeys": s.RequiredEnvKeys} {
			if !slices.IsSorted(keys) || len(slices.Compact(slices.Clone(keys))) != len(keys) {
				t.Fatalf("%s %s not sorted and unique: %q", s.ID(), name, keys)
			}
		}
		for _, k := range s.RequiredEnvKeys {
			if !slices.Contains(s.RequiredKeys, k) {
				t.Fatalf("%s: required env key %q not among the required keys %q", s.ID(), k, s.RequiredKeys)
			}
		}
		if len(s.RequiredKeys) > 0 && !s.Required {
			t.Fatalf("%s has required keys but is not required", s.ID())
		}
	}
}

// FuzzEncoding checks that distinct inputs never share an encoding: two sources (kind,
// name, which keys the pod sees, how) and their contents (absent, or data and binaryData)
// whose encodings are equal are the same input, as the pod sees it.
func FuzzEncoding(f *testing.F) {
	f.Add(uint8(0), "a", "", "k=v", "", uint8(0), "a", "", "k=v", "")
	f.Add(uint8(0), "ab", "", "", "", uint8(0), "a", "", "b=", "")
	f.Add(uint8(2), "a", "k", "k=v", "", uint8(4), "a", "k", "", "k=v")
	f.Add(uint8(6), "a", "x,k", "", "k=v", uint8(6), "a", "k", "", "k=v")
	f.Add(uint8(1), "db", "", "password=s", "", uint8(0), "db", "", "password=s", "")
	f.Add(uint8(8), "a", "", "", "", uint8(0), "a", "", "", "")
	f.Add(uint8(0), "a", "", "k=missing", "", uint8(2), "a", "k", "", "")
	f.Add(uint8(0), "a", "", "k=v\nk2=", "k=w", uint8(4), "a", "", "k=v\nk2=", "")
	f.Fuzz(func(t *testing.T, f1 uint8, n1, k1, d1, b1 string, f2 uint8, n2, k2, d2, b2 string) {
		s1, c1 := fuzzSource(f1, n1, k1, d1, b1)
		s2, c2 := fuzzSource(f2, n2, k2, d2, b2)
		e1, e2 := encodeUnkeyed(s1, c1), encodeUnkeyed(s2, c2)
		v1, v2 := podView(s1, c1), podView(s2, c2)
		if string(e1) == string(e2) && !reflect.DeepEqual(v1, v2) {
			t.Fatalf("distinct inputs share an encoding:\n%#v\n%#v\nencoding %q", v1, v2, e1)
		}
		if string(e1) != string(e2) && reflect.DeepEqual(v1, v2) {
			t.Fatalf("the same input encodes two ways:\n%#v\n%q\n%q", v1, e1, e2)
		}
	})
}

// fuzzSource builds a source and its content: flags bit 0 a Secret, bit 1 selected keys
// (keys, comma-separated) rather than all, bit 2 mounted by a volume (binaryData counts),
// bit 3 absent; data and bin are "key=value" lines. A Secret has data only.
func fuzzSource(flags uint8, name, keys, data, bin string) (Source, *corev1.ConfigMap) {
	src := Source{Kind: KindConfigMap, Name: name, AllKeys: flags&2 == 0, Binary: flags&4 != 0}
	if flags&1 != 0 {
		src.Kind = KindSecret
	}
	if !src.AllKeys {
		src.Keys = sortedUnique(strings.Split(keys, ","))
	}
	if flags&8 != 0 {
		return src, nil
	}
	cm := &corev1.ConfigMap{}
	for _, line := range strings.Split(data, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			if cm.Data == nil {
				cm.Data = map[string]string{}
			}
			cm.Data[k] = v
		}
	}
	if src.Kind == KindConfigMap {
		for _, line := range strings.Split(bin, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				if cm.BinaryData == nil {
					cm.BinaryData = map[string][]byte{}
				}
				cm.BinaryData[k] = []byte(v)
			}
		}
	}
	return src, cm
}

// viewEntry is one key as the pod sees it.
type viewEntry struct{ Key, How, Value string }

// view is a source as the pod sees it, computed from the rules of docs/hash.md
// independently of the encoder: what must determine the encoding, and nothing else.
type view struct {
	Kind, Name string
	Missing    bool
	Entries    []viewEntry
}

func podView(src Source, cm *corev1.ConfigMap) view {
	v := view{Kind: src.Kind, Name: src.Name, Missing: cm == nil}
	if cm == nil {
		return v
	}
	keys := src.Keys
	if src.AllKeys {
		keys = nil
		for k := range cm.Data {
			keys = append(keys, k)
		}
		if src.Binary {
			for k := range cm.BinaryData {
				keys = append(keys, k)
			}
		}
		keys = sortedUnique(keys)
	}
	v.Entries = []viewEntry{}
	for _, k := range keys {
		e := viewEntry{Key: k, How: "missing"}
		if d, ok := cm.Data[k]; ok {
			e.How, e.Value = "data", d
		} else if b, ok := cm.BinaryData[k]; ok && src.Binary {
			e.How, e.Value = "binary", string(b)
		}
		v.Entries = append(v.Entries, e)
	}
	return v
}
