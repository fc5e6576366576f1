package configread

import (
	"maps"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// status is a SecretProviderClassPodStatus as the driver writes it.
func status(class, rv string, generation int64, versions ...string) unstructured.Unstructured {
	var objects []any
	for i := 0; i+1 < len(versions); i += 2 {
		objects = append(objects, map[string]any{"id": versions[i], "version": versions[i+1]})
	}
	u := unstructured.Unstructured{Object: map[string]any{"status": map[string]any{
		"secretProviderClassName": class, "mounted": true, "podName": "p", "objects": objects,
	}}}
	u.SetResourceVersion(rv)
	u.SetGeneration(generation)
	return u
}

func TestCSIVersions(t *testing.T) {
	for _, tc := range []struct {
		name        string
		items       []unstructured.Unstructured
		keepPending bool
		want        map[string]string
	}{
		{"no pod yet", nil, false, map[string]string{}},
		{"one mount", []unstructured.Unstructured{status("db", "10", 1, "secret/a", "v1")}, false, map[string]string{"secret/a": "v1"}},
		{"the last write wins, in resourceVersion order (not string order)", []unstructured.Unstructured{
			status("db", "100", 2, "secret/a", "v2"), status("db", "99", 1, "secret/a", "v1"),
		}, false, map[string]string{"secret/a": "v2"}},
		{"a new pod mounting after a rotation records the same versions", []unstructured.Unstructured{
			status("db", "100", 2, "secret/a", "v2"), status("db", "120", 1, "secret/a", "v2"),
		}, false, map[string]string{"secret/a": "v2"}},
		{"another class's status is not read", []unstructured.Unstructured{
			status("db", "10", 1, "secret/a", "v1"), status("other", "20", 2, "secret/a", "v9"),
		}, false, map[string]string{"secret/a": "v1"}},
		{"pending stays pending over first mounts", []unstructured.Unstructured{
			status("db", "10", 1, "secret/a", "v1"), status("db", "11", 1, "secret/a", "v1"),
		}, true, map[string]string{}},
		{"pending ends with a rotation", []unstructured.Unstructured{
			status("db", "10", 2, "secret/a", "v2"), status("db", "11", 1, "secret/a", "v1"),
		}, true, map[string]string{"secret/a": "v1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := csiVersions(tc.items, "db", tc.keepPending); !maps.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
