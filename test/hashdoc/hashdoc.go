// Package hashdoc recomputes configstamp's config hash from the encoding written in
// docs/hash.md, independently of the stamp package, so tests check the
// implementation against the written contract rather than against itself.
package hashdoc

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Source is what a pod sees of one ConfigMap (or, with Secret, one Secret): Keys nil
// means all keys. EnvOnly is true when no volume mounts it: then binaryData is not seen.
type Source struct {
	Name    string
	Keys    []string
	EnvOnly bool
	Secret  bool
}

func (s Source) kind() string {
	if s.Secret {
		return "secret"
	}
	return "configmap"
}

// Hash returns the config hash of srcs (ConfigMaps) in namespace under the
// installation's key, reading each through get (nil: the ConfigMap does not exist).
func Hash(srcs []Source, get func(name string) *corev1.ConfigMap, key []byte, namespace string) string {
	return Keyed(srcs, func(_ bool, name string) *corev1.ConfigMap { return get(name) }, key, namespace)
}

// Keyed returns the config hash of srcs, ConfigMaps and Secrets, reading each through
// get (a Secret's data as the ConfigMap's data; nil: it does not exist). Every digest
// is keyed with key, the installation's, for namespace.
func Keyed(srcs []Source, get func(secret bool, name string) *corev1.ConfigMap, key []byte, namespace string) string {
	nskey := NamespaceKey(key, namespace)
	return combine(Version, srcs, get, func(enc []byte) []byte { return mac(nskey, enc) })
}

// V1Hash is the config hash of srcs (ConfigMaps) in the predecessor's encoding
// (configstamp/v1, as docs/hash.md described it): the same source encoding, each
// ConfigMap's digest an unkeyed SHA-256. Anyone could compute it from content alone;
// tests use it to show that today's digests give such a guess nothing to match.
func V1Hash(srcs []Source, get func(name string) *corev1.ConfigMap) (hash string, digests []string) {
	var sums []string
	h := combine("configstamp/v1", srcs, func(_ bool, name string) *corev1.ConfigMap { return get(name) }, func(enc []byte) []byte {
		d := sha256.Sum256(enc)
		sums = append(sums, hex.EncodeToString(d[:]))
		return d[:]
	})
	return h, sums
}

// Unkeyed is the config hash of srcs (ConfigMaps) in today's encoding with each digest
// an unkeyed SHA-256: what anyone could compute from content alone, were digests not
// keyed. Tests use it to show that no stamp matches it.
func Unkeyed(srcs []Source, get func(name string) *corev1.ConfigMap) string {
	return combine(Version, srcs, func(_ bool, name string) *corev1.ConfigMap { return get(name) }, func(enc []byte) []byte {
		d := sha256.Sum256(enc)
		return d[:]
	})
}

// combine encodes each of srcs (sorted), digests it with digest, and hashes the
// digests after version.
func combine(version string, srcs []Source, get func(secret bool, name string) *corev1.ConfigMap, digest func([]byte) []byte) string {
	srcs = slices.Clone(srcs)
	slices.SortFunc(srcs, func(a, b Source) int {
		if c := strings.Compare(a.kind(), b.kind()); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	u64 := func(buf *bytes.Buffer, n int) { _ = binary.Write(buf, binary.BigEndian, uint64(n)) }
	str := func(buf *bytes.Buffer, s string) { u64(buf, len(s)); buf.WriteString(s) }
	var top bytes.Buffer
	str(&top, version)
	for _, s := range srcs {
		var buf bytes.Buffer
		str(&buf, s.kind())
		str(&buf, s.Name)
		if cm := get(s.Secret, s.Name); cm == nil {
			str(&buf, "missing")
		} else {
			str(&buf, "present")
			keys := slices.Clone(s.Keys)
			if s.Keys == nil {
				for k := range cm.Data {
					keys = append(keys, k)
				}
				for k := range cm.BinaryData {
					if !s.EnvOnly {
						keys = append(keys, k)
					}
				}
			}
			slices.Sort(keys)
			keys = slices.Compact(keys)
			u64(&buf, len(keys))
			for _, k := range keys {
				str(&buf, k)
				if v, ok := cm.Data[k]; ok {
					str(&buf, "data")
					str(&buf, v)
				} else if b, ok := cm.BinaryData[k]; ok && !s.EnvOnly {
					str(&buf, "binary")
					str(&buf, string(b))
				} else {
					str(&buf, "missing")
				}
			}
		}
		top.Write(digest(buf.Bytes()))
	}
	sum := sha256.Sum256(top.Bytes())
	return hex.EncodeToString(sum[:])
}

// Version is the encoding version docs/hash.md describes.
const Version = "configstamp/v2"

// NamespaceKey is nskey of docs/hash.md: the key of one namespace's digests.
func NamespaceKey(key []byte, namespace string) []byte {
	var ns bytes.Buffer
	u64 := func(n int) { _ = binary.Write(&ns, binary.BigEndian, uint64(n)) }
	u64(len("configstamp/namespace"))
	ns.WriteString("configstamp/namespace")
	u64(len(namespace))
	ns.WriteString(namespace)
	return mac(key, ns.Bytes())
}

// KeyFingerprint is the key fingerprint of docs/hash.md that records and nudges carry.
func KeyFingerprint(key []byte) string {
	var label bytes.Buffer
	_ = binary.Write(&label, binary.BigEndian, uint64(len("configstamp key fingerprint v1")))
	label.WriteString("configstamp key fingerprint v1")
	return hex.EncodeToString(mac(key, label.Bytes()))[:12]
}

func mac(key, b []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(b)
	return m.Sum(nil)
}
