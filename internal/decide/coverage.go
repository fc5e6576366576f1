package decide

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// The registration's coverage annotation (stamp.CoverageAnnotation), read and written
// here only.

// CoverageSecrets is the coverage key of Secrets (the others are resources).
const CoverageSecrets = stamp.CoverageSecrets

// CoverageNamespace is the coverage key of a namespace of a namespaced install (since
// when it is watched: it stands for the namespace's opt-in).
func CoverageNamespace(name string) string { return "namespace/" + name }

// scopePrefix starts the coverage key of configstamp's scope (CoverageScope).
const scopePrefix = "scope/"

// CoverageScope is the coverage key of configstamp's scope: a fingerprint of its opt-in
// label and excluded namespaces. A change of either (an upgrade of configstamp that
// excludes a namespace no longer, or renames the label) includes namespaces without a
// write of theirs to tell when: the entry's time (ScopeSince) stands for a write of
// every namespace's opt-in, so their workloads count as installed over then (Covered).
func CoverageScope(label string, excluded []string) string {
	sum := sha256.Sum256([]byte(label + "\x00" + strings.Join(slices.Sorted(slices.Values(excluded)), "\x00")))
	return scopePrefix + hex.EncodeToString(sum[:6])
}

// IsCoverageScope reports whether key is a CoverageScope key.
func IsCoverageScope(key string) bool { return strings.HasPrefix(key, scopePrefix) }

// ScopeSince is the time of the scope's entry in entries (the latest, should there be
// more than one; zero: none).
func ScopeSince(entries map[string]time.Time) time.Time {
	var t time.Time
	for k, v := range entries {
		if IsCoverageScope(k) && v.After(t) {
			t = v
		}
	}
	return t
}

// WatchedNamespace is the namespace Bypassed judges by in a namespaced install, which
// reads no Namespace: since when it has been watched (its CoverageNamespace entry,
// through CoveredSince) stands for its last write, as an opt-in's does; without an
// entry, none (not included).
func WatchedNamespace(name string, watchedSince time.Time) (metav1.Object, bool, error) {
	if watchedSince.IsZero() {
		return nil, false, nil
	}
	return &metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(watchedSince)}, true, nil
}

// CoveredSince is since when key (a resource, or CoverageSecrets) has been covered, from
// the registration's creation time and its coverage entries
// (stamp.CoverageAnnotation): Deployments since its creation, the others since their
// entry but never before its creation; zero when not covered.
func CoveredSince(created time.Time, entries map[string]time.Time, key string) time.Time {
	if key == workload.Deployment.Resource {
		return created
	}
	t, ok := entries[key]
	if !ok {
		return time.Time{}
	}
	if created.After(t) {
		return created
	}
	return t
}

// ParseCoverage reads the entries of a coverage annotation's value ("": none). An
// unreadable one (edited by hand) gives none, and the error.
func ParseCoverage(v string) (map[string]time.Time, error) {
	m := map[string]time.Time{}
	if v == "" {
		return m, nil
	}
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		return map[string]time.Time{}, err
	}
	return m, nil
}

// FormatCoverage is the coverage annotation's value of entries.
func FormatCoverage(entries map[string]time.Time) string {
	b, _ := json.Marshal(entries)
	return string(b)
}
