package decide

import (
	"maps"
	"testing"
	"time"

	"github.com/configstamp/configstamp/internal/workload"
)

func TestParseCoverage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		value   string
		want    map[string]time.Time
		wantErr bool
	}{
		{"none", "", map[string]time.Time{}, false},
		{"entries", `{"statefulsets":"2026-01-01T00:00:00Z","secrets":"2026-01-01T01:00:00Z"}`,
			map[string]time.Time{"statefulsets": t0, CoverageSecrets: t0.Add(time.Hour)}, false},
		{"edited by hand: none, and the error", `{"statefulsets":"2026-01-01T00:00:00Z","daemonsets":"yesterday"}`, map[string]time.Time{}, true},
		{"not an object", `["statefulsets"]`, map[string]time.Time{}, true},
	} {
		got, err := ParseCoverage(tc.value)
		if !maps.EqualFunc(got, tc.want, time.Time.Equal) || got == nil || (err != nil) != tc.wantErr {
			t.Errorf("%s: %v, %v; want %v (error %v)", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
}

// What FormatCoverage writes, ParseCoverage reads back.
func TestFormatCoverage(t *testing.T) {
	entries := map[string]time.Time{"statefulsets": t0, "daemonsets": t0.Add(time.Minute), CoverageSecrets: t0.Add(time.Hour)}
	v := FormatCoverage(entries)
	if want := `{"daemonsets":"2026-01-01T00:01:00Z","secrets":"2026-01-01T01:00:00Z","statefulsets":"2026-01-01T00:00:00Z"}`; v != want {
		t.Errorf("value %s, want %s", v, want)
	}
	if got, err := ParseCoverage(v); err != nil || !maps.EqualFunc(got, entries, time.Time.Equal) {
		t.Errorf("read back: %v, %v; want %v", got, err, entries)
	}
}

// A namespaced install's namespace stands as since when it is watched; without an
// entry, as none (not included).
func TestWatchedNamespace(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ns, in, err := WatchedNamespace("team", since)
	if err != nil || !in || ns.GetName() != "team" || !workload.LastWrite(ns).Equal(since) {
		t.Errorf("watched since %v: %v %v %v", since, ns, in, err)
	}
	if ns, in, err := WatchedNamespace("team", time.Time{}); err != nil || in || ns != nil {
		t.Errorf("no entry: %v %v %v", ns, in, err)
	}
}
