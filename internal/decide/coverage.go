package decide

import (
	"encoding/json"
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
