package stamp

import "strings"

// The webhook <-> watcher protocol: the marker on the watcher's updates, and the warning
// the webhook answers one with when it could not read config. Each side encodes and
// decodes it here only.

const (
	// NudgeAnnotation is set on a Deployment's metadata by the watcher's nudge and
	// stripped again by the webhook. It tells the webhook that the update is a nudge
	// (so an unstamped Deployment may be adopted) rather than someone's no-op update.
	NudgeAnnotation = "configstamp.io/nudge"
	// NudgeValue is the NudgeAnnotation value of a nudge that names no key (an older
	// watcher's); the watcher's nudge is NudgeFor its key.
	NudgeValue = "true"
	// nudgeKeyPrefix starts a nudge that names the key fingerprint of its sender.
	nudgeKeyPrefix = "key="
	// NudgeRecord is the NudgeAnnotation value of the watcher's own update of a record
	// (any other value is a nudge): only that update may change the record.
	NudgeRecord = "record"
)

// WarningUnreadConfig starts the warning the webhook answers an update with when it
// could not read config and kept what was stored: the watcher tells its nudges'
// outcome by it.
const WarningUnreadConfig = "configstamp: could not read config"

// WarningScopeUnknown starts the warning the webhook answers a review with when its
// namespace cache cannot place the namespace yet (not synced, or a namespace created a
// moment ago): nothing read, nothing stamped, the marker left. To the watcher's nudge
// that is a lagging replica, retried like unread config, not a bypass.
const WarningScopeUnknown = "configstamp: not stamped: configstamp could not tell whether the namespace opts in"

// WarningOtherKey starts the warning the webhook answers a nudge with that names
// another installation key than its own, even after it read its key again: it kept the
// stored stamp (no rollout), and the watcher retries once the replicas agree.
const WarningOtherKey = "configstamp: other_key"

// OtherKeyWarning is the warning of a nudge sent under the key fingerprint theirs,
// answered by a replica that holds ours.
// theirs is "" for a nudge that names no key (a watcher older than fingerprints).
func OtherKeyWarning(kind, theirs, ours string) string {
	sent := "under hash key " + theirs
	if theirs == "" {
		sent = "naming no hash key (by a configstamp older than this replica)"
	}
	return WarningOtherKey + ": the nudge was sent " + sent + ", this replica holds " + ours +
		"; the " + kind + " keeps its stored config hash until the replicas agree on the key"
}

// NudgeFor is the NudgeAnnotation value of a nudge sent by a watcher holding the key
// whose KeyFingerprint is key ("": NudgeValue).
func NudgeFor(key string) string {
	if key == "" {
		return NudgeValue
	}
	return nudgeKeyPrefix + key
}

// Marker is what an update's NudgeAnnotation says, whoever set it.
type Marker struct {
	// Present: the update carries the annotation (the webhook strips it).
	Present bool
	// Nudge: a nudge (any value but "" and NudgeRecord).
	Nudge bool
	// Record: the watcher's write of a record (NudgeRecord).
	Record bool
	// Key: the key fingerprint a nudge names (NudgeFor); "" when it names none or a
	// malformed one.
	Key string
}

// ParseMarker reads the marker in a workload's metadata annotations.
func ParseMarker(annotations map[string]string) Marker {
	v, ok := annotations[NudgeAnnotation]
	m := Marker{Present: ok, Nudge: ok && v != "" && v != NudgeRecord, Record: ok && v == NudgeRecord}
	if key, named := strings.CutPrefix(v, nudgeKeyPrefix); m.Nudge && named && IsKeyFingerprint(key) {
		m.Key = key
	}
	return m
}

// UnreadWarning is the warning of an update of a kind's workload admitted with its
// stored stamp because config could not be read (err).
func UnreadWarning(kind, storedHash string, err error) string {
	return WarningUnreadConfig + "; the " + kind + " keeps its stored config hash (" + ShortHash(storedHash) +
		") and configstamp re-checks it shortly: " + err.Error()
}

// IsUnreadWarning reports whether a warning is an UnreadWarning.
func IsUnreadWarning(w string) bool { return strings.HasPrefix(w, WarningUnreadConfig) }
