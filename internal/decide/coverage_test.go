package decide

import (
	"maps"
	"testing"
	"time"
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
