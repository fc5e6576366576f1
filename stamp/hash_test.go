package stamp

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/test/hashdoc"
)

func cm(name string, data map[string]string, bin map[string][]byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data, BinaryData: bin}
}

// The installation key, namespace and namespace key of the tests.
var (
	testKey       = []byte("configstamp-test-key-of-32-bytes")
	testNamespace = "shop"
	testNSKey     = NamespaceKey(testKey, testNamespace)
)

func lookupOf(cms ...*corev1.ConfigMap) Lookup {
	return func(_ context.Context, _, name string) (*corev1.ConfigMap, error) {
		for _, c := range cms {
			if c.Name == name {
				return c, nil
			}
		}
		return nil, nil
	}
}

func mustCompute(t *testing.T, srcs []Source, cms ...*corev1.ConfigMap) Stamp {
	t.Helper()
	st, err := Compute(context.Background(), srcs, lookupOf(cms...), testNSKey)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// refEncode renders the documented encoding with test/hashdoc, independently of Compute.
func refEncode(srcs []Source, cms map[string]*corev1.ConfigMap) string {
	var doc []hashdoc.Source
	for _, s := range srcs {
		doc = append(doc, hashdoc.Source{Name: s.Name, Keys: s.Keys, EnvOnly: !s.Binary})
	}
	return hashdoc.Hash(doc, func(name string) *corev1.ConfigMap { return cms[name] }, testKey, testNamespace)
}

func TestComputeMatchesDocumentedEncoding(t *testing.T) {
	srcs := []Source{
		{Kind: KindConfigMap, Name: "a", AllKeys: true, Binary: true},
		{Kind: KindConfigMap, Name: "b", Keys: []string{"k1", "nope"}},
		{Kind: KindConfigMap, Name: "gone", AllKeys: true, Binary: true},
	}
	cms := map[string]*corev1.ConfigMap{
		"a": cm("a", map[string]string{"z": "1", "y": ""}, map[string][]byte{"bin": {0, 1, 2}}),
		"b": cm("b", map[string]string{"k1": "v1", "k2": "invisible"}, nil),
	}
	got := mustCompute(t, srcs, cms["a"], cms["b"])
	if want := refEncode(srcs, cms); got.Hash != want {
		t.Fatalf("hash = %s, want %s", got.Hash, want)
	}
	if len(got.Hash) != 64 {
		t.Fatalf("hash %q is not hex SHA-256", got.Hash)
	}
	ann := got.SourcesAnnotation()
	parts := strings.Split(ann, ",")
	if len(parts) != 3 || !strings.HasPrefix(parts[0], "configmap/a=") || !strings.HasPrefix(parts[1], "configmap/b=") || parts[2] != "configmap/gone=missing" {
		t.Fatalf("sources annotation = %q", ann)
	}
	if len(strings.TrimPrefix(parts[0], "configmap/a=")) != 12 {
		t.Fatalf("digest in %q is not 12 hex characters", parts[0])
	}
}

func TestComputeSensitivity(t *testing.T) {
	all := []Source{{Kind: KindConfigMap, Name: "c", AllKeys: true, Binary: true}}
	envAll := []Source{{Kind: KindConfigMap, Name: "c", AllKeys: true}}
	one := []Source{{Kind: KindConfigMap, Name: "c", Keys: []string{"seen"}}}
	base := cm("c", map[string]string{"seen": "1", "other": "2"}, nil)
	h := func(srcs []Source, c *corev1.ConfigMap) string {
		if c == nil {
			return mustCompute(t, srcs).Hash
		}
		return mustCompute(t, srcs, c).Hash
	}
	tests := []struct {
		name  string
		srcs  []Source
		c     *corev1.ConfigMap
		equal bool
	}{
		{"same content", all, cm("c", map[string]string{"other": "2", "seen": "1"}, nil), true},
		{"labels and annotations do not count", all, func() *corev1.ConfigMap {
			c := base.DeepCopy()
			c.Labels = map[string]string{"x": "y"}
			c.Annotations = map[string]string{"a": "b"}
			return c
		}(), true},
		{"invisible key does not count", one, cm("c", map[string]string{"seen": "1", "other": "changed"}, nil), true},
		{"visible key counts", one, cm("c", map[string]string{"seen": "changed", "other": "2"}, nil), false},
		{"data value counts", all, cm("c", map[string]string{"seen": "1", "other": "3"}, nil), false},
		{"new key counts", all, cm("c", map[string]string{"seen": "1", "other": "2", "new": ""}, nil), false},
		{"missing differs from empty", all, nil, false},
		{"data moved to binaryData counts", all, cm("c", map[string]string{"seen": "1"}, map[string][]byte{"other": []byte("2")}), false},
		{"binaryData counts for a volume", all, cm("c", map[string]string{"seen": "1", "other": "2"}, map[string][]byte{"b": {1}}), false},
		{"binaryData does not count for envFrom", envAll, cm("c", map[string]string{"seen": "1", "other": "2"}, map[string][]byte{"b": {1}}), true},
		{"boundary shift counts", all, cm("c", map[string]string{"seen": "1o", "ther": "2"}, nil), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := h(tt.srcs, base), h(tt.srcs, tt.c)
			if (a == b) != tt.equal {
				t.Fatalf("hash equal = %v, want %v (%s vs %s)", a == b, tt.equal, a, b)
			}
		})
	}
}

func TestComputeEnvKeyInBinaryDataIsMissing(t *testing.T) {
	env := []Source{{Kind: KindConfigMap, Name: "c", Keys: []string{"k"}, Required: true, RequiredKeys: []string{"k"}}}
	missing := mustCompute(t, env, cm("c", nil, nil))
	binary := mustCompute(t, env, cm("c", nil, map[string][]byte{"k": []byte("v")}))
	if missing.Hash != binary.Hash {
		t.Fatal("env sees a key that only binaryData holds")
	}
	if got := binary.Unmet(); len(got) != 1 || got[0] != "configmap/c lacks key k" {
		t.Fatalf("Unmet() = %q", got)
	}
}

func TestComputeMissingKeyDiffersFromEmptyValue(t *testing.T) {
	srcs := []Source{{Kind: KindConfigMap, Name: "c", Keys: []string{"k"}}}
	missing := mustCompute(t, srcs, cm("c", nil, nil))
	empty := mustCompute(t, srcs, cm("c", map[string]string{"k": ""}, nil))
	if missing.Hash == empty.Hash {
		t.Fatal("a missing key hashes like an empty value")
	}
}

func TestComputeIgnoredAndNone(t *testing.T) {
	ign := cm("ign", map[string]string{"k": "v"}, nil)
	ign.Annotations = map[string]string{IgnoreAnnotation: "true"}
	srcs := []Source{{Kind: KindConfigMap, Name: "ign", AllKeys: true}, {Kind: KindConfigMap, Name: "keep", AllKeys: true}}
	with := mustCompute(t, srcs, ign, cm("keep", map[string]string{"a": "b"}, nil))
	without := mustCompute(t, srcs[1:], cm("keep", map[string]string{"a": "b"}, nil))
	if with.Hash != without.Hash || with.SourcesAnnotation() != without.SourcesAnnotation() {
		t.Fatalf("ignored ConfigMap changed the stamp: %+v vs %+v", with, without)
	}
	if st := mustCompute(t, srcs[:1], ign); st.Hash != "" || len(st.Sources) != 0 {
		t.Fatalf("only ignored sources: got %+v, want empty stamp", st)
	}
	if st := mustCompute(t, nil); st.Hash != "" {
		t.Fatalf("no sources: got %+v", st)
	}
}

func TestComputeLookupError(t *testing.T) {
	boom := errors.New("boom")
	_, err := Compute(context.Background(), []Source{{Kind: KindConfigMap, Name: "x", AllKeys: true}},
		func(context.Context, string, string) (*corev1.ConfigMap, error) { return nil, boom }, testNSKey)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "configmap x") {
		t.Fatalf("err = %v", err)
	}
}

// The worked example of docs/hash.md, from the implementation.
func TestDocumentedExample(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	app := cm("app", map[string]string{"app.yaml": "port: 8080\n"}, nil)
	whole := Source{Kind: KindConfigMap, Name: "app", AllKeys: true, Binary: true}
	gone := Source{Kind: KindConfigMap, Name: "gone", AllKeys: true, Binary: true}
	for _, tc := range []struct {
		srcs             []Source
		namespace        string
		hash, annotation string
	}{
		{[]Source{whole}, "shop", "a79589406f69694cb3775e550076a1f1d09ab4c00db188490903ed8729536df8", "configmap/app=ef845071f624"},
		{[]Source{whole, gone}, "shop", "7ec1cdb88fd7b6a390f35047856175a06e1bb738ff7332be5769c9cbe29b19f1", "configmap/app=ef845071f624,configmap/gone=missing"},
		{[]Source{whole}, "other", "5187165018d9e565a97e4a91a3b07759701b6e4dd105d39996d39b7dc6accf9d", "configmap/app=b920748811ee"},
	} {
		st, err := Compute(context.Background(), tc.srcs, lookupOf(app), NamespaceKey(key, tc.namespace))
		if err != nil {
			t.Fatal(err)
		}
		if st.Hash != tc.hash || st.SourcesAnnotation() != tc.annotation {
			t.Errorf("%s: %s %s, want %s %s (docs/hash.md)", tc.namespace, st.Hash, st.SourcesAnnotation(), tc.hash, tc.annotation)
		}
	}
}
