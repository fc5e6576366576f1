// Package configread adapts a controller-runtime reader to the stamp core, so that the
// webhook and the watcher compute stamps with exactly the same code.
package configread

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/lru"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/configstamp/configstamp/stamp"
)

// Lookup reads the sources of one namespace through r, each as its kind's Content gives
// it. Pass an uncached reader (manager.GetAPIReader()): a cache can lag behind a write
// made a moment ago (and a cached Secret read would cache every Secret).
func Lookup(r client.Reader, namespace string) stamp.Lookup {
	return func(ctx context.Context, kind, name string) (*corev1.ConfigMap, error) {
		k := sourceKind(kind)
		if k == stamp.SecretProviderClass {
			return csiContent(ctx, r, namespace, name, nil)
		}
		obj := k.New()
		if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj); err != nil {
			return nil, client.IgnoreNotFound(err)
		}
		return k.Content(obj), nil
	}
}

// LookupOver is Lookup for a template whose stored sources annotation is stored, with
// key the namespace's digest key (NamespaceKey): a SecretProviderClass reads as the
// webhook reads it over that stamp (csiVersions keeps the stored versions until a
// rotation).
func LookupOver(r client.Reader, namespace, stored string, key []byte) stamp.Lookup {
	prev := stamp.ParseSources(stored)
	plain := Lookup(r, namespace)
	return func(ctx context.Context, kind, name string) (*corev1.ConfigMap, error) {
		if kind != stamp.KindSecretProviderClass || len(key) == 0 {
			return plain(ctx, kind, name)
		}
		src := stamp.Source{Kind: kind, Name: name, AllKeys: true, Binary: true}
		return csiContent(ctx, r, namespace, name, csiKeeps(src, key, prev[src.ID()]))
	}
}

// sourceKind is the source kind named kind; a ConfigMap's for an unknown name
// (stamp.Consumed gives none).
func sourceKind(kind string) *stamp.SourceKind {
	if k := stamp.SourceKindNamed(kind); k != nil {
		return k
	}
	return stamp.ConfigMap
}

// Reader computes stamps from live reads.
type Reader struct {
	// Client reads sources live (manager.GetAPIReader() or a client of its own), never
	// from a cache.
	Client client.Reader
	// Cache, when set, lets an unchanged source be checked with a metadata-only read.
	Cache *DigestCache
	// Key returns the installation's hash key (it may change: a rotation); without one,
	// any source is an error.
	Key func() []byte
	// Timeout bounds the reads of one stamp (0: no deadline).
	Timeout time.Duration
	// Seen, when set, gives the resourceVersion at which the caller's own watch cache
	// holds a source ("" if it holds none). A source held there at another
	// resourceVersion than its cached digest's has moved: its content is read at once,
	// without the metadata-only read first (one round trip fewer for the watcher's
	// check of a change). Only which read comes first depends on it: a stale answer
	// costs a read, never a wrong digest.
	Seen func(ctx context.Context, kind, namespace, name string) string
	// KeyDigests: give each source its per-key digests (stamp.KeyDigests), for the
	// keys annotation: computed when its content is read, else from the cache. The
	// webhook writes them; the watcher computes them too, so that the cache entries it
	// makes of changed content serve the webhook's read of its nudge.
	KeyDigests bool
}

// Stamp computes the stamp of srcs (stamp.Consumed of a workload in namespace), with
// the fingerprint of the key it was keyed under.
func (r *Reader) Stamp(ctx context.Context, namespace string, srcs []stamp.Source) (stamp.Stamp, error) {
	return r.StampOver(ctx, namespace, srcs, "")
}

// StampOver is Stamp for a template whose stored sources annotation is stored: a
// SecretProviderClass keeps the digest it shows until the driver records a rotation
// (csiVersions).
func (r *Reader) StampOver(ctx context.Context, namespace string, srcs []stamp.Source, stored string) (stamp.Stamp, error) {
	var key []byte
	fp := ""
	if r.Key != nil {
		if k := r.Key(); len(k) > 0 {
			key, fp = stamp.NamespaceKey(k, namespace), stamp.KeyFingerprint(k)
		}
	}
	st, err := compute(ctx, reads{r.Client, r.Cache, r.Seen, stamp.ParseSources(stored), r.KeyDigests, &statusesOnce{}}, key, namespace, srcs, r.Timeout)
	st.Key = fp
	return st, err
}

// MetaGVK is the GroupVersionKind of a source kind, for metadata-only reads.
func MetaGVK(kind string) schema.GroupVersionKind { return sourceKind(kind).GVK() }

// NewMeta is an empty metadata-only object of a source kind.
func NewMeta(kind string) *metav1.PartialObjectMetadata { return sourceKind(kind).NewMeta() }

// DigestCache remembers, per ConfigMap and key selection, the digest of the content at
// one resourceVersion (which changes with every write), so an unchanged ConfigMap is
// checked with a live metadata-only read instead of a read of its content. It holds
// 32-byte digests, never content, and is bounded: its memory does not grow with config
// size.
type DigestCache struct{ lru, bigKeys *lru.Cache }

type cached struct {
	uid, resourceVersion string
	sum                  [32]byte
	unmet                string
	// keys are the per-key digests (stamp.KeyDigests), where keysKnown (at most
	// maxCachedKeys bytes); keysBig: longer ones, in the DigestCache's bigKeys;
	// keysTried: the content was read for them (unknown then: too many), so a read that
	// asks for keys need not read it again.
	keys                          string
	keysKnown, keysBig, keysTried bool
}

// bigKey is an entry of DigestCache.bigKeys: the per-key digests of one source at one
// resourceVersion.
type bigKey struct{ uid, resourceVersion, keys string }

// maxCachedKeys bounds the per-key digests a cache entry keeps (the cache's memory:
// at most 8 MiB more for its 16384 entries). Longer ones (up to
// stamp.MaxKeysAnnotation) go to the bigKeys of the latest bigKeysEntries sources
// read (at most 2 MiB more), so that a changed source consumed by many workloads names
// its keys in each one's rollout; evicted, they are unknown from the cache (not read
// again: a check of unchanged config stays a metadata read).
const (
	maxCachedKeys  = 512
	bigKeysEntries = 256
)

// NewDigestCache holds up to size digests.
func NewDigestCache(size int) *DigestCache {
	return &DigestCache{lru: lru.New(size), bigKeys: lru.New(bigKeysEntries)}
}

// entryKeys are the per-key digests an entry serves (unknown when evicted from
// bigKeys); served is false when a read asking for keys must read the content (it was
// never read for them).
func (c *DigestCache) entryKeys(key digestKey, e cached) (keys string, known, served bool) {
	if !e.keysBig {
		return e.keys, e.keysKnown, e.keysTried
	}
	if v, ok := c.bigKeys.Get(key); ok {
		if b := v.(bigKey); b.uid == e.uid && b.resourceVersion == e.resourceVersion {
			return b.keys, true, true
		}
	}
	return "", false, true
}

// digestKey is a DigestCache key: the SHA-256 of what names the source (cacheKey's
// text), 32 bytes an entry whatever the names and key selections' length.
type digestKey [sha256.Size]byte

// cacheKey names one source of one namespace with everything that decides its digest
// and its unmet requirements (key selection, binaryData visibility, which keys are
// required). Every field is length-prefixed, so no two sources share a text, whatever
// their names and keys contain; the key is that text's SHA-256.
func cacheKey(namespace string, src stamp.Source, hmacKey []byte) digestKey {
	b := make([]byte, 0, 256) // on the stack for the usual names: hashed, not kept
	field := func(s string) {
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, ':')
		b = append(b, s...)
	}
	flag := func(v bool) {
		if v {
			b = append(b, '1')
		} else {
			b = append(b, '0')
		}
	}
	field(namespace)
	field(src.Kind)
	// A digest depends on the key: a rotated key must not find the digests made with
	// the old one.
	fp := sha256.Sum256(hmacKey)
	field(hex.EncodeToString(fp[:8]))
	field(src.Name)
	flag(src.AllKeys)
	flag(src.Binary)
	flag(src.Required)
	field(strconv.Itoa(len(src.Keys)))
	for _, k := range src.Keys {
		field(k)
	}
	for _, list := range [][]string{src.RequiredKeys, src.RequiredEnvKeys} {
		field(strconv.Itoa(len(list)))
		for _, k := range list {
			field(k)
		}
	}
	return sha256.Sum256(b)
}

// ErrTimeout marks a stamp whose reads ran past the Reader's Timeout: too many sources
// for the client's budget, or a slow API server.
var ErrTimeout = errors.New("config reads ran past their deadline")

// timedOut reports whether err ended reads under ctx's deadline: it passed, or the
// client's rate limiter refused to wait past it (golang.org/x/time/rate says so in
// words only, and before the deadline).
func timedOut(ctx context.Context, err error) bool {
	return errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) ||
		strings.Contains(err.Error(), "would exceed context deadline")
}

// maxParallelReads bounds the concurrent reads of one stamp computation.
const maxParallelReads = 8

// reads is how compute reads: live through client, with the digest cache and the
// caller's Seen when set.
type reads struct {
	client client.Reader
	cache  *DigestCache
	seen   func(ctx context.Context, kind, namespace, name string) string
	stored map[string]string // the stored sources annotation, parsed
	keys   bool
	// statuses lists the namespace's CSI pod statuses once for every class read.
	statuses *statusesOnce
}

// compute reads srcs live under timeout (no deadline when timeout is 0) and combines
// their digests. With a cache, each source is first read metadata-only, unless seen
// shows it moved; its content is read only when its resourceVersion has no digest in
// the cache.
func compute(ctx context.Context, r reads, key []byte, namespace string, srcs []stamp.Source, timeout time.Duration) (stamp.Stamp, error) {
	if len(srcs) == 0 {
		return stamp.Stamp{}, nil
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	// Read every source at once (each read waits on the API server), then combine.
	digests := make([]*stamp.Digest, len(srcs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(maxParallelReads)
	for i, src := range srcs {
		g.Go(func() (err error) {
			// A panic here would not reach the webhook's or the controller's recovery
			// (another goroutine): it would end the process. Return it as an error.
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("read %s %s/%s: panic: %v", src.Kind, namespace, src.Name, p)
					logf.FromContext(ctx).Error(err, "Config read panicked (a bug)", "stack", string(debug.Stack()))
				}
			}()
			d, err := digest(gctx, r, key, namespace, src)
			if err != nil {
				return fmt.Errorf("read %s %s/%s: %w", src.Kind, namespace, src.Name, err)
			}
			digests[i] = d
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		if timeout > 0 && timedOut(ctx, err) {
			return stamp.Stamp{}, fmt.Errorf("%w (%s, %d sources): %w", ErrTimeout, timeout, len(srcs), err)
		}
		return stamp.Stamp{}, err
	}
	kept := make([]stamp.Digest, 0, len(srcs))
	for _, d := range digests {
		if d != nil {
			kept = append(kept, *d)
		}
	}
	return stamp.Combine(kept), nil
}

// digest returns one source's digest, or nil when the source is ignored. A source
// seen before is first read metadata-only (unless the caller's watch cache shows it
// moved); its content is read when it is new, or when its resourceVersion moved.
func digest(ctx context.Context, rd reads, hmacKey []byte, namespace string, src stamp.Source) (*stamp.Digest, error) {
	if len(hmacKey) == 0 {
		return nil, stamp.ErrNoKey
	}
	r, cache := rd.client, rd.cache
	if src.Kind == stamp.KindSecretProviderClass {
		// Its content moves without the class: never cached.
		cm, err := rd.statuses.content(ctx, r, namespace, src.Name, csiKeeps(src, hmacKey, rd.stored[src.ID()]))
		if err != nil || stamp.Ignored(cm) {
			return nil, err
		}
		d := stamp.SourceDigest(src, cm, hmacKey)
		return &d, nil
	}
	key := cacheKey(namespace, src, hmacKey)
	if cache != nil {
		prev, ok := cache.get(key)
		keys, keysKnown, served := cache.entryKeys(key, prev)
		if ok && !moved(ctx, rd, namespace, src, prev) && (!rd.keys || served) {
			meta := NewMeta(src.Kind)
			err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: src.Name}, meta)
			if apierrors.IsNotFound(err) {
				d := stamp.SourceDigest(src, nil, hmacKey)
				d.KeysKnown = rd.keys // a missing source has no keys
				return &d, nil
			}
			if err != nil {
				return nil, err
			}
			if stamp.IsTrue(meta.Annotations[stamp.IgnoreAnnotation]) {
				return nil, nil
			}
			if string(meta.UID) == prev.uid && meta.ResourceVersion == prev.resourceVersion {
				return &stamp.Digest{Kind: src.Kind, Name: src.Name, Sum: prev.sum, Unmet: prev.unmet, Keys: keys, KeysKnown: keysKnown}, nil
			}
		}
	}
	cm, err := Lookup(r, namespace)(ctx, src.Kind, src.Name)
	if err != nil {
		return nil, err
	}
	if stamp.Ignored(cm) {
		return nil, nil
	}
	d := stamp.SourceDigest(src, cm, hmacKey)
	if rd.keys {
		d.Keys, d.KeysKnown = stamp.KeyDigests(src, cm, hmacKey)
	}
	if cache != nil && cm != nil {
		c := cached{uid: string(cm.UID), resourceVersion: cm.ResourceVersion, sum: d.Sum, unmet: d.Unmet, keysTried: rd.keys}
		switch {
		case !d.KeysKnown:
		case len(d.Keys) <= maxCachedKeys:
			c.keys, c.keysKnown = d.Keys, true
		default:
			c.keysBig = true
			cache.bigKeys.Add(key, bigKey{uid: c.uid, resourceVersion: c.resourceVersion, keys: d.Keys})
		}
		cache.lru.Add(key, c)
	}
	return &d, nil
}

// get is the entry of key.
func (c *DigestCache) get(key digestKey) (cached, bool) {
	v, ok := c.lru.Get(key)
	if !ok {
		return cached{}, false
	}
	return v.(cached), true
}

// moved reports whether the caller's watch cache holds src at another resourceVersion
// than prev's.
func moved(ctx context.Context, rd reads, namespace string, src stamp.Source, prev cached) bool {
	if rd.seen == nil {
		return false
	}
	rv := rd.seen(ctx, src.Kind, namespace, src.Name)
	return rv != "" && rv != prev.resourceVersion
}
