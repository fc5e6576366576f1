package stamp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// KeysAnnotation on a workload's metadata keeps a short keyed digest of every key its
// pods consume, per source, so that configstamp's next rollout can name the keys that
// changed (never their values). Written by the webhook with the stamp where it fits
// (MaxKeysAnnotation, CauseHeadroom); metadata only, so writing it rolls nothing.
//
//	configmap/app=3f2a1c9e0b7d:a.yaml=1f2e3d4c,b.yaml=0a1b2c3d;secret/db=9c01d2e3f4a5:password=77aa88bb
//
// Each source carries its digest as the sources annotation shows it: its keys count
// only while that digest is the one the stamp names.
const KeysAnnotation = "configstamp.io/keys"

// MaxKeysAnnotation bounds the KeysAnnotation: a workload consuming more keys than fit
// gets none, and its rollouts say "keys: unknown".
const MaxKeysAnnotation = 8 << 10

// keyDigestChars is how many hex characters of a key's digest KeysAnnotation keeps:
// enough to tell a change, too few to test guesses of a value against.
const keyDigestChars = 8

// KeyDigests renders the per-key digests of one source as the pod sees it ("k=d,..."
// in key order; "" for a missing source): the HMAC-SHA256 under key (the NamespaceKey,
// as SourceDigest) of s("configstamp/key v1") s(kind) s(name) s(key) and the key's
// entry as the source encoding writes it. ok is false, and it stops, once they pass
// MaxKeysAnnotation (the annotation would be left out anyway).
func KeyDigests(src Source, cm *corev1.ConfigMap, key []byte) (_ string, ok bool) {
	if cm == nil || len(key) == 0 {
		return "", true
	}
	keys := consumedKeys(src, cm)
	var b strings.Builder
	m := hmac.New(sha256.New, key)
	for i, k := range keys {
		m.Reset()
		writeStr(m, "configstamp/key v1")
		writeStr(m, src.Kind)
		writeStr(m, src.Name)
		writeStr(m, k)
		if v, ok := cm.Data[k]; ok {
			writeStr(m, markerData)
			writeStr(m, v)
		} else if bv, ok := cm.BinaryData[k]; ok && src.Binary {
			writeStr(m, markerBinary)
			writeStr(m, string(bv))
		} else {
			writeStr(m, markerMissing)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(hex.EncodeToString(m.Sum(nil))[:keyDigestChars])
		if b.Len() > MaxKeysAnnotation {
			return "", false
		}
	}
	return b.String(), true
}

// sourceKeys is one source's entry in a KeysAnnotation.
type sourceKeys struct {
	digest string
	keys   map[string]string
}

// parseKeys reads a KeysAnnotation by "kind/name"; malformed entries are left out.
func parseKeys(v string) map[string]sourceKeys {
	out := map[string]sourceKeys{}
	for _, e := range strings.Split(v, ";") {
		head, list, ok := strings.Cut(e, ":")
		src, digest, ok2 := strings.Cut(head, "=")
		if !ok || !ok2 || src == "" {
			continue
		}
		sk := sourceKeys{digest: digest, keys: map[string]string{}}
		for _, kv := range strings.Split(list, ",") {
			if k, d, ok := strings.Cut(kv, "="); ok && k != "" {
				sk.keys[k] = d
			}
		}
		out[src] = sk
	}
	return out
}

// KeysValue is the KeysAnnotation of st: each source's fresh per-key digests
// (Digest.Keys, where KeysKnown), or, where the source was not read (its digest came from a cache), its
// entry in stored when that names the same digest; a source with neither is left out.
// "" when the result exceeds MaxKeysAnnotation.
func KeysValue(st Stamp, stored string) string {
	old := parseKeys(stored)
	var b strings.Builder
	for _, d := range st.Sources {
		digest := "missing"
		if !d.Missing {
			digest = d.Hex()[:digestChars]
		}
		src := d.Kind + "/" + d.Name
		keys := d.Keys
		if !d.KeysKnown {
			o, ok := old[src]
			if !ok || o.digest != digest {
				continue
			}
			keys = renderKeys(o.keys)
		}
		if b.Len() > 0 {
			b.WriteByte(';')
		}
		b.WriteString(src + "=" + digest + ":" + keys)
	}
	if b.Len() > MaxKeysAnnotation {
		return ""
	}
	return b.String()
}

func renderKeys(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

// ChangedKeys names the keys of src whose digest differs between two KeysAnnotation
// values (before, with the source at digest was; after, at now), in key order: added,
// changed and removed keys alike. known is false when either value lacks src at that
// digest (not written: over budget, first sight, or written for other content).
func ChangedKeys(before, after, src, was, now string) (names []string, known bool) {
	b, okb := parseKeys(before)[src]
	a, oka := parseKeys(after)[src]
	if !okb || !oka || b.digest != was || a.digest != now {
		return nil, false
	}
	for k, d := range a.keys {
		if b.keys[k] != d {
			names = append(names, k)
		}
	}
	for k := range b.keys {
		if _, still := a.keys[k]; !still {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	return names, true
}

// maxCauseKeys is how many changed keys a change cause names per source; more are
// counted ("and N more").
const maxCauseKeys = 5

// keysNote is what a change cause says of the keys of src that changed: their names,
// or "keys: unknown".
func keysNote(before, after, src, was, now string) string {
	names, known := ChangedKeys(before, after, src, was, now)
	if !known {
		return "keys: unknown"
	}
	if len(names) > maxCauseKeys {
		names = append(names[:maxCauseKeys:maxCauseKeys], fmt.Sprintf("and %d more", len(names)-maxCauseKeys))
	}
	return "keys: " + strings.Join(names, ", ")
}
