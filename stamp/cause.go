package stamp

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// ChangeCauseAnnotation is the workload annotation `kubectl rollout history` shows for a
// revision: the Deployment controller copies a Deployment's annotations to the
// ReplicaSet of the rollout. The webhook sets it on the rollouts configstamp causes (a
// nudge) and removes a cause of its own from someone else's rollout.
const ChangeCauseAnnotation = "kubernetes.io/change-cause"

// causePrefix starts every change cause configstamp writes.
const causePrefix = "configstamp: "

// IsOwnChangeCause reports whether a change cause is one configstamp wrote.
func IsOwnChangeCause(v string) bool { return strings.HasPrefix(v, causePrefix) }

// OwnChangeReason is the reason of a change cause configstamp wrote (ChangeReason), and
// whether v is one.
func OwnChangeReason(v string) (string, bool) { return strings.CutPrefix(v, causePrefix) }

// ChangedSources lists the sources ("kind/name") whose digest differs between two
// sources annotations (SourcesAnnotation), in the order of after, then those dropped.
func ChangedSources(before, after string) []string {
	b, a := ParseSources(before), ParseSources(after)
	var out []string
	for _, e := range strings.Split(after, ",") {
		k, _, _ := strings.Cut(e, "=")
		if k != "" && b[k] != a[k] {
			out = append(out, k)
		}
	}
	for _, e := range strings.Split(before, ",") {
		k, _, _ := strings.Cut(e, "=")
		if _, still := a[k]; k != "" && !still {
			out = append(out, k)
		}
	}
	return out
}

// MaxChangeCause bounds the bytes of a change cause configstamp writes, so that one
// annotation (copied onto every revision) stays small however many sources changed.
const MaxChangeCause = 1024

// causeSources is how many sources a change cause names; more are counted ("and N more").
const causeSources = 3

// Rollout is what the change cause of a rollout configstamp causes is written from.
type Rollout struct {
	// StoredHash and StoredSources are the stamp the template carried (empty: none).
	StoredHash, StoredSources string
	// Hash and Sources are the stamp it gets (empty: no config counted any more).
	Hash, Sources string
	// Ran is the config hash the pods run per a valid, certain record (Observed);
	// empty without one.
	Ran string
	// Restart tells that the template keeps its stamp and a restart time rolls it.
	Restart bool
	// StoredKeys and Keys are the workload's KeysAnnotation before and after (empty:
	// none), which name the keys of a changed source that changed.
	StoredKeys, Keys string
	// Wave names the waves the rollout rolls in ("wave 2 of 4 for configmap/shared";
	// "": not in waves), told by the watcher's nudge.
	Wave string
}

// ChangeCause describes a rollout configstamp causes, for `kubectl rollout history`.
//
// It says only what configstamp knows. When a certain record says the pods ran other
// config than the template's stamp names (Ran differs from StoredHash: a stamp made for
// another template, or none, and the record the watcher kept of the pods' config), the
// stamp's per-source digests are not what the pods ran, and the record keeps only the
// config hash: the cause gives that hash and the new one ("config changed (config hash
// A -> B)"), naming no source as changed (the sources that differ from the stale stamp
// need not be those that changed for the pods). Otherwise it compares the stamps source
// by source: a digest that changed (old and new), a source newly counted (absent from
// the stamp: Secrets turned on, an ignore annotation removed) or no longer counted. A
// template without a stamp before gets "first stamp" with its sources' digests. At most
// causeSources sources are named ("and N more"), and the whole is cut to MaxChangeCause
// bytes.
func ChangeCause(r Rollout) string { return causePrefix + ChangeReason(r) }

// ChangeReason is ChangeCause without its "configstamp: " prefix, at most
// MaxChangeCause-len("configstamp: ") bytes: the watcher's ConfigChanged Event gives it, so
// the Event and `kubectl rollout history` say the same of one rollout.
func ChangeReason(r Rollout) string {
	var body string
	switch {
	case r.Restart:
		body = fmt.Sprintf("pods restarted onto the config their stamp names (config hash %s -> %s)", ShortHash(r.Ran), ShortHash(r.Hash))
	case r.Ran != "" && r.Ran != r.StoredHash:
		body = fmt.Sprintf("config changed (config hash %s -> %s)", ShortHash(r.Ran), ShortHash(r.Hash))
		if r.StoredHash == "" && r.Sources != "" {
			body += "; first stamp (" + firstStamp(r.Sources) + ")"
		}
	case r.StoredHash == "":
		body = "first stamp (" + firstStamp(r.Sources) + ")"
	case r.StoredSources == "":
		// A stamp without its sources list: no per-source digests to compare.
		body = fmt.Sprintf("config changed (config hash %s -> %s)", ShortHash(r.StoredHash), ShortHash(r.Hash))
	default:
		b, a := ParseSources(r.StoredSources), ParseSources(r.Sources)
		var parts []string
		for _, src := range ChangedSources(r.StoredSources, r.Sources) {
			switch {
			case b[src] == "":
				parts = append(parts, fmt.Sprintf("%s newly counted (digest %s)", src, a[src]))
			case a[src] == "":
				parts = append(parts, fmt.Sprintf("%s no longer counted (digest was %s)", src, b[src]))
			default:
				parts = append(parts, fmt.Sprintf("%s changed (digest %s -> %s; %s)", src, b[src], a[src],
					keysNote(r.StoredKeys, r.Keys, src, b[src], a[src])))
			}
		}
		if len(parts) == 0 {
			// The same digests (the sources list does not tell the change).
			body = fmt.Sprintf("config changed (config hash %s -> %s)", ShortHash(r.StoredHash), ShortHash(r.Hash))
		} else {
			body = strings.Join(capList(parts), "; ")
		}
	}
	n := MaxChangeCause - len(causePrefix)
	if r.Wave == "" {
		return capBytes(body, n)
	}
	wave := " (" + r.Wave + ")"
	return capBytes(capBytes(body, n-min(len(wave), n/2))+wave, n)
}

// firstStamp lists the sources of a sources annotation with their digests.
func firstStamp(sources string) string {
	var parts []string
	for _, e := range strings.Split(sources, ",") {
		if k, d, ok := strings.Cut(e, "="); ok {
			parts = append(parts, k+" "+d)
		}
	}
	return strings.Join(capList(parts), ", ")
}

// capList keeps the first causeSources items, and counts the rest.
func capList(parts []string) []string {
	if len(parts) <= causeSources {
		return parts
	}
	return append(parts[:causeSources:causeSources], fmt.Sprintf("and %d more", len(parts)-causeSources))
}

// capBytes cuts s to at most n bytes (on a UTF-8 boundary), ending in "..." when cut.
func capBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// ShortHash is the first 12 hex digits of a config hash, as Events and logs show it
// ("none": no stamp).
func ShortHash(h string) string {
	switch {
	case h == "":
		return "none"
	case len(h) > 12:
		return h[:12]
	}
	return h
}
