package explain

import (
	"github.com/configstamp/configstamp/stamp"
)

// legacyReason says a workload was stamped with the predecessor's encoding, when it can
// tell cheaply: every ConfigMap in the stamp, read now, has the digest that encoding
// gives it (and at least one is present). Then the next check re-stamps it (one
// rollout), whatever changed.
func legacyReason(in Input, r *Report, refs []stamp.Source) (string, bool) {
	stamped := stamp.ParseSources(r.Stamp.Sources)
	seen := 0
	for _, ref := range refs {
		if ref.Kind != stamp.KindConfigMap {
			continue
		}
		cm, read := in.Live.Content[ref.ID()]
		got, ok := stamped[ref.ID()]
		if !read || !ok || cm == nil || got == "missing" {
			continue
		}
		if len(got) != 12 {
			return "", false
		}
		if stamp.LegacyConfigMapDigest(ref, cm).Hex()[:len(got)] != got {
			return "", false
		}
		seen++
	}
	if seen == 0 {
		return "", false
	}
	return "stamped with an older encoding (" + stamp.LegacyEncodingVersion + ", before every digest was keyed per namespace); the next check re-stamps it: one rollout, once after the upgrade", true
}
