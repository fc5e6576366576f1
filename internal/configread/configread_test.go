package configread

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/configstamp/configstamp/stamp"
)

func spec(names ...string) *corev1.PodSpec {
	s := &corev1.PodSpec{}
	for _, n := range names {
		s.Volumes = append(s.Volumes, corev1.Volume{Name: n, VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: n}}}})
	}
	return s
}

func TestStampWithDigestCache(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	var contentReads atomic.Int64
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "ua"}, Data: map[string]string{"k": "1"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b", UID: "ub"}, Data: map[string]string{"k": "1"}},
	).WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*corev1.ConfigMap); ok && key.Name != "missing" {
			contentReads.Add(1) // a missing ConfigMap costs one 404 either way
		}
		return c.Get(ctx, key, obj, opts...)
	}}).Build()
	ctx := context.Background()
	cache := NewDigestCache(16)
	uncached := func() stamp.Stamp {
		st, err := (&Reader{Client: c, Cache: nil, Key: testKey}).Stamp(ctx, "ns", stamp.References(spec("a", "b", "missing")))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	first, err := (&Reader{Client: c, Cache: cache, Key: testKey}).Stamp(ctx, "ns", stamp.References(spec("a", "b", "missing")))
	if err != nil {
		t.Fatal(err)
	}
	if first.Hash == "" || first.Hash != uncached().Hash || first.SourcesAnnotation() != uncached().SourcesAnnotation() {
		t.Fatalf("cached path computes %q, uncached %q", first.Hash, uncached().Hash)
	}
	contentReads.Store(0)
	again, _ := (&Reader{Client: c, Cache: cache, Key: testKey}).Stamp(ctx, "ns", stamp.References(spec("a", "b", "missing")))
	if contentReads.Load() != 0 || again.Hash != first.Hash {
		t.Fatalf("unchanged ConfigMaps: %d content reads (want 0), hash %q vs %q", contentReads.Load(), again.Hash, first.Hash)
	}

	// A write changes the resourceVersion: that one ConfigMap is read again.
	var a corev1.ConfigMap
	_ = c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "a"}, &a)
	a.Data["k"] = "2"
	if err := c.Update(ctx, &a); err != nil {
		t.Fatal(err)
	}
	contentReads.Store(0)
	changed, _ := (&Reader{Client: c, Cache: cache, Key: testKey}).Stamp(ctx, "ns", stamp.References(spec("a", "b", "missing")))
	if contentReads.Load() != 1 || changed.Hash == first.Hash || changed.Hash != uncached().Hash {
		t.Fatalf("after a write: %d content reads (want 1), hash changed %v, equals uncached %v", contentReads.Load(), changed.Hash != first.Hash, changed.Hash == uncached().Hash)
	}

	// An ignore annotation (metadata) is seen without a content read.
	a.Annotations = map[string]string{stamp.IgnoreAnnotation: "true"}
	if err := c.Update(ctx, &a); err != nil {
		t.Fatal(err)
	}
	ign, _ := (&Reader{Client: c, Cache: cache, Key: testKey}).Stamp(ctx, "ns", stamp.References(spec("a", "b", "missing")))
	if len(ign.Sources) != 2 || ign.Hash != uncached().Hash {
		t.Fatalf("ignored ConfigMap: %d sources, hash equals uncached %v", len(ign.Sources), ign.Hash == uncached().Hash)
	}
}

func TestCacheKeyIsCollisionFree(t *testing.T) {
	src := func(all bool, keys ...string) stamp.Source {
		return stamp.Source{Kind: stamp.KindConfigMap, Name: "c", AllKeys: all, Keys: keys}
	}
	distinct := []struct {
		ns  string
		src stamp.Source
	}{
		{"ns", src(true)},
		{"ns", src(false, "*")},
		{"ns", src(false, "a\x00b")},
		{"ns", src(false, "a", "b")},
		{"ns", src(false, "a/b")},
		{"ns/c", stamp.Source{Kind: stamp.KindConfigMap, Name: "", AllKeys: true}},
		{"ns", stamp.Source{Kind: stamp.KindConfigMap, Name: "c", AllKeys: true, Binary: true}},
		{"ns", stamp.Source{Kind: stamp.KindConfigMap, Name: "c", AllKeys: true, Required: true}},
		{"ns", stamp.Source{Kind: stamp.KindConfigMap, Name: "c", Keys: []string{"a"}, RequiredKeys: []string{"a"}}},
		{"ns", src(false, "a")},
		{"ns", stamp.Source{Kind: stamp.KindConfigMap, Name: "c", Keys: []string{"a"}, RequiredEnvKeys: []string{"a"}}},
		{"ns", stamp.Source{Kind: stamp.KindSecret, Name: "c", AllKeys: true}},
	}
	seen := map[digestKey]int{}
	for i, d := range distinct {
		k := cacheKey(d.ns, d.src, testKey())
		if j, dup := seen[k]; dup {
			t.Fatalf("sources %d and %d share the cache key %x", j, i, k)
		}
		seen[k] = i
	}
	// A rotated hash key finds none of the digests made with the old one.
	if k := cacheKey("ns", src(true), []byte("another key")); func() bool { _, dup := seen[k]; return dup }() {
		t.Fatalf("a rotated hash key shares the cache key %x", k)
	}
}

// TestCacheKeyAllocatesNothing: the key is made on every read of a source (a cache hit
// too), hashed from a buffer on the stack for the usual names.
func TestCacheKeyAllocatesNothing(t *testing.T) {
	src := stamp.Source{Kind: stamp.KindConfigMap, Name: "my-release-chart-config", Keys: []string{"app.yaml", "log.yaml"}, RequiredKeys: []string{"app.yaml"}}
	key := testKey()
	if n := testing.AllocsPerRun(100, func() { cacheKey("team-namespace", src, key) }); n != 0 {
		t.Fatalf("cacheKey allocates %v times a call, want 0", n)
	}
}

// TestDigestsDependOnNamespace: a Secret, and a ConfigMap, of the same name and
// content in two namespaces has two digests (a digest from one namespace confirms no
// guess about the other), each the documented HMAC under the namespace's key.
func TestDigestsDependOnNamespace(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	var objs []client.Object
	for _, ns := range []string{"victim", "attacker"} {
		objs = append(objs,
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, Data: map[string][]byte{"password": []byte("hunter2")}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, Data: map[string]string{"password": "hunter2"}})
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	key := []byte("0123456789abcdef0123456789abcdef")
	r := &Reader{Client: c, Cache: NewDigestCache(16), Key: func() []byte { return key }}
	srcs := []stamp.Source{{Kind: stamp.KindSecret, Name: "db", AllKeys: true}, {Kind: stamp.KindConfigMap, Name: "db", AllKeys: true}}
	stamps := map[string]stamp.Stamp{}
	for _, ns := range []string{"victim", "attacker"} {
		st, err := r.Stamp(context.Background(), ns, srcs)
		if err != nil {
			t.Fatal(err)
		}
		stamps[ns] = st
		sec := &corev1.Secret{Data: map[string][]byte{"password": []byte("hunter2")}}
		want := stamp.SourceDigest(srcs[0], stamp.SecretContent(sec), stamp.NamespaceKey(key, ns))
		if st.Sources[0].Sum != want.Sum {
			t.Errorf("%s: the Secret's digest is not the HMAC under the namespace's key", ns)
		}
	}
	if stamps["victim"].Sources[0].Sum == stamps["attacker"].Sources[0].Sum {
		t.Error("the same Secret in two namespaces has one digest")
	}
	if stamps["victim"].Sources[1].Sum == stamps["attacker"].Sources[1].Sum {
		t.Error("the same ConfigMap in two namespaces has one digest")
	}
	// The derivation, independently: HMAC-SHA256(key, s("configstamp/namespace") ‖ s(ns)).
	m := hmac.New(sha256.New, key)
	for _, s := range []string{"configstamp/namespace", "victim"} {
		_ = binary.Write(m, binary.BigEndian, uint64(len(s)))
		m.Write([]byte(s))
	}
	if !bytes.Equal(m.Sum(nil), stamp.NamespaceKey(key, "victim")) {
		t.Error("NamespaceKey is not the documented derivation")
	}
}

// A reader that panics is an error of the stamp, not the end of the process (the read
// runs in a goroutine no recovery of the webhook's or the controller's reaches).
func TestStampReadPanicIsAnError(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			panic("reader bug")
		}}).Build()
	_, err := (&Reader{Client: c, Key: testKey}).Stamp(context.Background(), "ns", stamp.References(spec("a")))
	if err == nil || !strings.Contains(err.Error(), "panic: reader bug") {
		t.Fatalf("Stamp with a panicking reader: %v, want an error naming the panic", err)
	}
}

// testKey is the installation key of the tests.
func testKey() []byte { return []byte("0123456789abcdef0123456789abcdef") }

// TestStampReadsAMovedSourceAtOnce: a source the caller's watch cache (Seen) holds at
// another resourceVersion than its cached digest's is read for its content at once, with
// no metadata-only read first; one held at the digest's resourceVersion, or not held,
// is read metadata-only first as before; a wrong answer costs a read, never the stamp.
func TestStampReadsAMovedSourceAtOnce(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	var metaReads, contentReads atomic.Int64
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "ua"}, Data: map[string]string{"k": "1"}},
	).WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		switch obj.(type) {
		case *corev1.ConfigMap:
			contentReads.Add(1)
		case *metav1.PartialObjectMetadata:
			metaReads.Add(1)
		}
		return c.Get(ctx, key, obj, opts...)
	}}).Build()
	ctx := context.Background()
	cache := NewDigestCache(16)
	seen := ""
	r := &Reader{Client: c, Cache: cache, Key: testKey, Seen: func(context.Context, string, string, string) string { return seen }}
	stampNow := func() stamp.Stamp {
		t.Helper()
		metaReads.Store(0)
		contentReads.Store(0)
		st, err := r.Stamp(ctx, "ns", stamp.References(spec("a")))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	first := stampNow()
	var a corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "a"}, &a); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what          string
		seen          string
		meta, content int64
	}{
		{"held at the digest's resourceVersion", a.ResourceVersion, 1, 0},
		{"not held", "", 1, 0},
		{"held at another resourceVersion (a wrong answer here)", a.ResourceVersion + "0", 0, 1},
	} {
		seen = tc.seen
		if st := stampNow(); metaReads.Load() != tc.meta || contentReads.Load() != tc.content || st.Hash != first.Hash {
			t.Errorf("%s: %d metadata and %d content reads (want %d and %d), same stamp %v",
				tc.what, metaReads.Load(), contentReads.Load(), tc.meta, tc.content, st.Hash == first.Hash)
		}
	}

	// A write the watch cache has seen: its content is read at once, the new stamp taken.
	a.Data["k"] = "2"
	if err := c.Update(ctx, &a); err != nil {
		t.Fatal(err)
	}
	seen = a.ResourceVersion
	if st := stampNow(); metaReads.Load() != 0 || contentReads.Load() != 1 || st.Hash == first.Hash {
		t.Errorf("after a write: %d metadata and %d content reads (want 0 and 1), stamp changed %v", metaReads.Load(), contentReads.Load(), st.Hash != first.Hash)
	}
	// And it is remembered: held at that resourceVersion now, it is read metadata-only.
	if stampNow(); metaReads.Load() != 1 || contentReads.Load() != 0 {
		t.Errorf("again: %d metadata and %d content reads, want 1 and 0", metaReads.Load(), contentReads.Load())
	}
}

// TestStampTimeout: reads that run past the Reader's Timeout end in an error that says
// so (ErrTimeout), whether the read itself failed on the deadline or the client's rate
// limiter refused to wait past it; another read error does not.
func TestStampTimeout(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	for _, tc := range []struct {
		name    string
		get     func(ctx context.Context) error
		timeout bool
	}{
		{"deadline", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, true},
		{"rate limiter", func(context.Context) error {
			return errors.New("client rate limiter Wait returned an error: rate: Wait(n=1) would exceed context deadline")
		}, true},
		{"other", func(context.Context) error { return errors.New("connection refused") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
				Get: func(ctx context.Context, _ client.WithWatch, _ client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
					return tc.get(ctx)
				}}).Build()
			_, err := (&Reader{Client: c, Key: testKey, Timeout: 50 * time.Millisecond}).Stamp(context.Background(), "ns", stamp.References(spec("a", "b")))
			if err == nil || errors.Is(err, ErrTimeout) != tc.timeout {
				t.Fatalf("error %v: ErrTimeout %v, want %v", err, errors.Is(err, ErrTimeout), tc.timeout)
			}
		})
	}
}

// TestKeyDigestsThroughTheCache: a source read with its keys keeps them in the cache, so
// the next read (another workload's, the webhook's read of a nudge) names them without
// reading the content; an entry made without keys is read again when keys are asked for.
func TestKeyDigestsThroughTheCache(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	var contentReads atomic.Int64
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "ua"}, Data: map[string]string{"k": "1", "l": "2"}},
	).WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*corev1.ConfigMap); ok {
			contentReads.Add(1)
		}
		return c.Get(ctx, key, obj, opts...)
	}}).Build()
	ctx := context.Background()
	cache := NewDigestCache(16)
	read := func(keys bool) stamp.Digest {
		st, err := (&Reader{Client: c, Cache: cache, Key: testKey, KeyDigests: keys}).Stamp(ctx, "ns", stamp.References(spec("a")))
		if err != nil || len(st.Sources) != 1 {
			t.Fatal(err)
		}
		return st.Sources[0]
	}
	if d := read(false); d.KeysKnown {
		t.Fatal("keys without asking")
	}
	contentReads.Store(0)
	fresh := read(true)
	if contentReads.Load() != 1 || !fresh.KeysKnown || !strings.HasPrefix(fresh.Keys, "k=") {
		t.Fatalf("an entry without keys: %d content reads (want 1), keys %q %v", contentReads.Load(), fresh.Keys, fresh.KeysKnown)
	}
	contentReads.Store(0)
	if d := read(true); contentReads.Load() != 0 || !d.KeysKnown || d.Keys != fresh.Keys {
		t.Fatalf("from the cache: %d content reads (want 0), keys %q %v, want %q", contentReads.Load(), d.Keys, d.KeysKnown, fresh.Keys)
	}
}

// Per-key digests too long for a cache entry (a source of many keys) are served from the
// cache all the same: a changed source consumed by many workloads names its keys in each
// one's rollout, not only in the first one's.
func TestLongKeyDigestsThroughTheCache(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	var contentReads atomic.Int64
	big := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "ua"}, Data: map[string]string{}}
	for i := range 60 {
		big.Data[fmt.Sprintf("setting-%03d", i)] = "v"
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(big).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.ConfigMap); ok {
				contentReads.Add(1)
			}
			return c.Get(ctx, key, obj, opts...)
		}}).Build()
	cache := NewDigestCache(16)
	read := func() stamp.Digest {
		st, err := (&Reader{Client: c, Cache: cache, Key: testKey, KeyDigests: true}).Stamp(context.Background(), "ns", stamp.References(spec("a")))
		if err != nil || len(st.Sources) != 1 {
			t.Fatal(err)
		}
		return st.Sources[0]
	}
	fresh := read()
	if !fresh.KeysKnown || len(fresh.Keys) <= maxCachedKeys {
		t.Fatalf("want keys longer than %d bytes, got %d (known %v)", maxCachedKeys, len(fresh.Keys), fresh.KeysKnown)
	}
	contentReads.Store(0)
	for range 3 {
		if d := read(); !d.KeysKnown || d.Keys != fresh.Keys {
			t.Fatalf("from the cache: keys known %v, %d bytes, want the %d read", d.KeysKnown, len(d.Keys), len(fresh.Keys))
		}
	}
	if n := contentReads.Load(); n != 0 {
		t.Fatalf("%d content reads from the cache, want 0", n)
	}
	// Evicted from the long ones: unknown, and not read again (a check of unchanged
	// config stays a metadata read).
	cache.bigKeys.Clear()
	if d := read(); d.KeysKnown || contentReads.Load() != 0 {
		t.Fatalf("after eviction: keys known %v, %d content reads (want 0)", d.KeysKnown, contentReads.Load())
	}
}
