package webhook

import (
	"maps"
	"testing"

	"github.com/configstamp/configstamp/stamp"
)

// TestWithOwner: a Job takes its CronJob's extra sources and skip where it has none of
// its own, and nothing else of it.
func TestWithOwner(t *testing.T) {
	extra, skip := stamp.ExtraSourcesAnnotation, stamp.SkipAnnotation
	for _, c := range []struct {
		name             string
		own, owner, want map[string]string
	}{
		{"no owner", map[string]string{"a": "1"}, nil, map[string]string{"a": "1"}},
		{"none of its own", nil, map[string]string{extra: "configmap/x", skip: "true", "other": "no"}, map[string]string{extra: "configmap/x", skip: "true"}},
		{"its own win", map[string]string{extra: "configmap/mine", skip: "false"}, map[string]string{extra: "configmap/x", skip: "true"}, map[string]string{extra: "configmap/mine", skip: "false"}},
		{"an empty own value wins", map[string]string{extra: ""}, map[string]string{extra: "configmap/x"}, map[string]string{extra: ""}},
		{"one of each", map[string]string{skip: "false", "a": "1"}, map[string]string{extra: "configmap/x", skip: "true"}, map[string]string{skip: "false", "a": "1", extra: "configmap/x"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := maps.Clone(c.own)
			got := withOwner(c.own, c.owner)
			if !maps.Equal(got, c.want) {
				t.Errorf("withOwner = %v, want %v", got, c.want)
			}
			if !maps.Equal(c.own, before) {
				t.Errorf("withOwner changed the object's annotations: %v, were %v", c.own, before)
			}
		})
	}
}
