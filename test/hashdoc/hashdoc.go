// Package hashdoc recomputes configstamp's config hash from the encoding written in
// docs/hash.md, independently of the stamp package, so tests check the
// implementation against the written contract rather than against itself.
package hashdoc

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Source is what a pod sees of one ConfigMap: Keys nil means all keys. EnvOnly is true
// when no volume mounts it: then binaryData is not seen.
type Source struct {
	Name    string
	Keys    []string
	EnvOnly bool
}

// Hash returns the config hash of srcs, reading each ConfigMap through get (nil: the
// ConfigMap does not exist).
func Hash(srcs []Source, get func(name string) *corev1.ConfigMap) string {
	srcs = slices.Clone(srcs)
	slices.SortFunc(srcs, func(a, b Source) int { return strings.Compare(a.Name, b.Name) })
	u64 := func(buf *bytes.Buffer, n int) { _ = binary.Write(buf, binary.BigEndian, uint64(n)) }
	str := func(buf *bytes.Buffer, s string) { u64(buf, len(s)); buf.WriteString(s) }
	var top bytes.Buffer
	str(&top, "configstamp/v1")
	for _, s := range srcs {
		var buf bytes.Buffer
		str(&buf, "configmap")
		str(&buf, s.Name)
		if cm := get(s.Name); cm == nil {
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
		digest := sha256.Sum256(buf.Bytes())
		top.Write(digest[:])
	}
	sum := sha256.Sum256(top.Bytes())
	return hex.EncodeToString(sum[:])
}
