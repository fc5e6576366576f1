package stamp

import (
	"crypto/sha256"

	corev1 "k8s.io/api/core/v1"
)

// LegacyEncodingVersion is the predecessor's encoding: a ConfigMap's digest was the
// unkeyed SHA-256 of its encoding (a Secret's was keyed as now).
const LegacyEncodingVersion = "configstamp/v1"

// LegacyConfigMapDigest is a ConfigMap's digest in LegacyEncodingVersion, only to
// recognise a stamp made before the upgrade (explain): it is never stamped, and says
// nothing its caller could not compute from content it has read.
func LegacyConfigMapDigest(src Source, cm *corev1.ConfigMap) Digest {
	enc := encoder{h: sha256.New()}
	enc.source(src, cm)
	d := Digest{Kind: src.Kind, Name: src.Name, Missing: cm == nil}
	enc.h.Sum(d.Sum[:0])
	return d
}
