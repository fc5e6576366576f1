package stamp

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"slices"
	"strings"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
)

// EncodingVersion opens every config-hash encoding; a new encoding gets a new version.
// v1 hashed ConfigMaps unkeyed; v2 keys every source's digest per namespace.
const EncodingVersion = "configstamp/v2"

// digestChars is how many hex characters of a source digest the sources annotation shows.
const digestChars = 12

// Lookup reads one source of the workload's namespace by kind and name, as its
// SourceKind's Content gives it. It returns (nil, nil) when the source does not exist.
type Lookup func(ctx context.Context, kind, name string) (*corev1.ConfigMap, error)

// Digest is the hash of one source as the pod sees it.
type Digest struct {
	Kind    string
	Name    string
	Missing bool
	// Unmet is what the pods would lack to start with this content (Source.Unmet); it
	// is not part of the hash.
	Unmet string
	// Sum is the HMAC-SHA256 of the source's encoding under its namespace's key
	// (NamespaceKey), so a stamp lets no one without the key test guesses of the content.
	Sum [sha256.Size]byte
	// Keys are the source's per-key digests (KeyDigests), where KeysKnown: its content
	// was read for them. Neither is part of the hash.
	Keys      string
	KeysKnown bool
}

// Hex is Sum in lowercase hex.
func (d Digest) Hex() string { return hex.EncodeToString(d.Sum[:]) }

// Stamp is what the webhook writes into a pod template.
type Stamp struct {
	// Hash is the hex SHA-256 over every source; empty when the template consumes no
	// (non-ignored) ConfigMap, in which case nothing is stamped.
	Hash    string
	Sources []Digest
	// Key is the KeyFingerprint of the installation key the digests are keyed under
	// (set by configread; "" when unknown).
	Key string
}

// Unmet lists what required config is missing (Source.Unmet), in source order: the
// pods of a template stamped with it could not start.
func (s Stamp) Unmet() []string {
	var out []string
	for _, d := range s.Sources {
		if d.Unmet != "" {
			out = append(out, d.Unmet)
		}
	}
	return out
}

// SourcesAnnotation renders the per-source digests, e.g.
// "configmap/gateway-apis=3f2a1c9e0b7d,configmap/common=9c01d2e3f4a5".
func (s Stamp) SourcesAnnotation() string {
	var b strings.Builder
	for i, d := range s.Sources {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(d.Kind)
		b.WriteByte('/')
		b.WriteString(d.Name)
		b.WriteByte('=')
		if d.Missing {
			b.WriteString("missing")
			continue
		}
		b.WriteString(d.Hex()[:digestChars])
	}
	return b.String()
}

// ParseSources reads a SourcesAnnotation value into digests ("missing" for a missing
// source) by "kind/name".
func ParseSources(v string) map[string]string {
	m := map[string]string{}
	for _, e := range strings.Split(v, ",") {
		if k, d, ok := strings.Cut(e, "="); ok {
			m[k] = d
		}
	}
	return m
}

// Compute reads every source through lookup and hashes what the pod can see. ConfigMaps
// annotated configstamp.io/ignore=true are left out as if not referenced. A missing
// ConfigMap, or a missing selected key, is hashed as an explicit marker, so that its later
// creation changes the hash. See docs/hash.md for the encoding: each source is
// hashed on its own (SourceDigest), and the config hash covers the sources' digests
// (Combine), so every byte of config is hashed once.
// key is the HMAC key of the namespace's digests (NamespaceKey; see SourceDigest).
func Compute(ctx context.Context, sources []Source, lookup Lookup, key []byte) (Stamp, error) {
	if len(sources) > 0 && len(key) == 0 {
		return Stamp{}, ErrNoKey
	}
	digests := make([]Digest, 0, len(sources))
	for _, src := range sources {
		cm, err := lookup(ctx, src.Kind, src.Name)
		if err != nil {
			return Stamp{}, fmt.Errorf("read %s %s: %w", src.Kind, src.Name, err)
		}
		if Ignored(cm) {
			continue
		}
		digests = append(digests, SourceDigest(src, cm, key))
	}
	return Combine(digests), nil
}

// Ignored reports whether a source is annotated configstamp.io/ignore=true.
func Ignored(cm *corev1.ConfigMap) bool {
	return cm != nil && IsTrue(cm.Annotations[IgnoreAnnotation])
}

// ErrNoKey: a digest was asked for without a key. Every digest is keyed; an unkeyed one
// is never made.
var ErrNoKey = errors.New("no hash key: every source digest is keyed")

// SourceDigest hashes one source as the pod sees it; cm is nil when it does not exist.
// The digest is the HMAC-SHA256 of its encoding under key, the NamespaceKey of the
// source's namespace, which must not be empty (callers check: Compute returns ErrNoKey).
func SourceDigest(src Source, cm *corev1.ConfigMap, key []byte) Digest {
	if len(key) == 0 {
		panic("stamp: " + ErrNoKey.Error())
	}
	enc := encoder{h: sha256.New()}
	enc.macBegin(key)
	enc.source(src, cm)
	d := Digest{Kind: src.Kind, Name: src.Name, Missing: cm == nil, Unmet: src.Unmet(cm)}
	enc.macEnd(key, &d.Sum)
	return d
}

// NamespaceKey is the key of the digests of one namespace, derived from the
// installation's key: HMAC-SHA256(key, s("configstamp/namespace") ‖ s(namespace)). A
// digest so depends on its namespace as well as its name and content: a digest of a
// ConfigMap or Secret in one namespace (in an admission response, a log line, an Event)
// cannot be compared with the digest of the same content in another namespace, and
// without the key no guess of the content can be tested against it.
func NamespaceKey(key []byte, namespace string) []byte {
	m := hmac.New(sha256.New, key)
	writeStr(m, "configstamp/namespace")
	writeStr(m, namespace)
	return m.Sum(nil)
}

// KeyFingerprintChars is how many hex characters of a key fingerprint records and
// nudges carry.
const KeyFingerprintChars = 12

// KeyFingerprint names the installation key a stamp was made under, without revealing
// anything toward it or any digest (docs/hash.md): the first KeyFingerprintChars hex
// characters of HMAC-SHA256(key, s("configstamp key fingerprint v1")). Replicas that
// read the key Secret at different moments tell by it that they disagree.
func KeyFingerprint(key []byte) string {
	if len(key) == 0 {
		return ""
	}
	m := hmac.New(sha256.New, key)
	writeStr(m, "configstamp key fingerprint v1")
	return hex.EncodeToString(m.Sum(nil))[:KeyFingerprintChars]
}

// IsKeyFingerprint reports whether s has the form of a KeyFingerprint.
func IsKeyFingerprint(s string) bool {
	if len(s) != KeyFingerprintChars {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Combine makes the stamp from the digests of the (non-ignored) sources, in
// References order.
func Combine(digests []Digest) Stamp {
	if len(digests) == 0 {
		return Stamp{}
	}
	total := sha256.New()
	writeStr(total, EncodingVersion)
	for i := range digests {
		total.Write(digests[i].Sum[:])
	}
	return Stamp{Hash: hex.EncodeToString(total.Sum(nil)), Sources: digests}
}

// Markers used by the encoding.
const (
	markerPresent = "present"
	markerMissing = "missing"
	markerData    = "data"
	markerBinary  = "binary"
)

// encoder writes the length-prefixed encoding into a hash without allocating per field.
type encoder struct {
	h   hash.Hash
	buf [8]byte
	// block holds an HMAC pad, and after the outer pad the inner hash (mac.go).
	block [blockSize + sha256.Size]byte
}

func (e *encoder) u64(n uint64) {
	binary.BigEndian.PutUint64(e.buf[:], n)
	e.h.Write(e.buf[:])
}

// str writes str(s) without copying s: hash writers never modify their input.
func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	if len(s) > 0 {
		e.h.Write(unsafe.Slice(unsafe.StringData(s), len(s)))
	}
}

func (e *encoder) bytes(b []byte) {
	e.u64(uint64(len(b)))
	e.h.Write(b)
}

// writeStr writes str(s) into h (for the few fields outside the per-source encoder).
func writeStr(h hash.Hash, s string) {
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], uint64(len(s)))
	h.Write(buf[:])
	h.Write([]byte(s))
}

// source writes one source's encoding:
//
//	str(kind) str(name) str("missing")                         ConfigMap absent
//	str(kind) str(name) str("present") u64(n) n × entry         otherwise
//	entry = str(key) (str("data") str(value) | str("binary") str(bytes) | str("missing"))
//
// where str(x) is x's length as a big-endian uint64 followed by x's bytes, and the n keys
// are sorted bytewise: every key of data (and of binaryData, when a volume mounts the
// source) when the pod sees all keys, else the selected keys. binaryData counts only
// when a volume mounts the source: env and envFrom cannot see it.
func (e *encoder) source(src Source, cm *corev1.ConfigMap) {
	e.str(src.Kind)
	e.str(src.Name)
	if cm == nil {
		e.str(markerMissing)
		return
	}
	e.str(markerPresent)
	keys := consumedKeys(src, cm)
	e.u64(uint64(len(keys)))
	for _, k := range keys {
		e.str(k)
		if v, ok := cm.Data[k]; ok {
			e.str(markerData)
			e.str(v)
		} else if b, ok := cm.BinaryData[k]; ok && src.Binary {
			e.str(markerBinary)
			e.bytes(b)
		} else {
			e.str(markerMissing)
		}
	}
}

// consumedKeys are the keys of cm the pods see through src, sorted bytewise: every key
// of data (and of binaryData when a volume mounts the source) when they see all keys,
// else the selected ones (src.Keys).
func consumedKeys(src Source, cm *corev1.ConfigMap) []string {
	if !src.AllKeys {
		return src.Keys
	}
	keys := make([]string, 0, len(cm.Data)+len(cm.BinaryData))
	for k := range cm.Data {
		keys = append(keys, k)
	}
	if src.Binary {
		for k := range cm.BinaryData {
			if _, dup := cm.Data[k]; !dup {
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	return keys
}
