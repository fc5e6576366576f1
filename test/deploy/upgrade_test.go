package deploy

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// TestRenderReuseValues: helm upgrade --reuse-values renders this chart with the values of
// the release it upgrades, the values.yaml of the chart that installed it (with what was
// set then) in place of this chart's, so a value added since is missing; in a chart whose
// values.yaml is empty every value is (as is one set to null). Each takes its default: a
// copy of the chart with the values.yaml of an earlier chart (testdata: 778bed9's, before
// the ports, shutdownDelay, hostNetwork, the security contexts, metrics.secure,
// caSwitchDelay, prometheusRule and grafanaDashboard), or with none, renders exactly what
// the chart renders, its NOTES too, by default and with every option on.
func TestRenderReuseValues(t *testing.T) {
	old, err := os.ReadFile(filepath.Join("testdata", "values-778bed9.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	everything := []string{"--set", "certificates.mode=self-signed", "--set", "secrets.enabled=true", "--set", "argoRollouts.enabled=true",
		"--set", "metrics.secure=true", "--set", "hostNetwork=true", "--set", "serviceMonitor.enabled=true", "--set", "networkPolicy.enabled=true",
		"--set", "prometheusRule.enabled=true", "--set", "grafanaDashboard.enabled=true"}
	// A default changed since: networkPolicy.enabled (778bed9's values say false, which
	// --reuse-values keeps, as values.yaml says), so both sides set it.
	changed := []string{"--set", "networkPolicy.enabled=true"}
	wantDefault, wantEverything, wantNotes := renderText(t, chart, changed...), renderText(t, chart, everything...), notes(t, changed...)
	for name, values := range map[string]string{"778bed9": string(old), "empty": "{}\n"} {
		t.Run(name, func(t *testing.T) {
			dir := chartCopy(t, t.TempDir())
			if err := os.WriteFile(filepath.Join(dir, "values.yaml"), []byte(values), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				args []string
				want string
			}{{changed, wantDefault}, {everything, wantEverything}} {
				got := renderText(t, dir, tc.args...)
				for _, bad := range []string{"<nil>", "%!", "<no value>"} {
					if strings.Contains(got, bad) {
						t.Errorf("%v: renders %q", tc.args, bad)
					}
				}
				if got != tc.want {
					t.Errorf("%v: renders otherwise than with the chart's values.yaml: %s", tc.args, firstDifference(got, tc.want))
				}
			}
			if got := notesFrom(t, dir, changed...); got != wantNotes {
				t.Errorf("NOTES otherwise than with the chart's values.yaml: %s", firstDifference(got, wantNotes))
			}
		})
	}
}

// TestRenderDefaultsMatchValues: the defaults the templates fill in for missing values
// (templates/_defaults.tpl) are values.yaml's, value for value.
func TestRenderDefaultsMatchValues(t *testing.T) {
	decode := func(what string, raw []byte) map[string]any {
		t.Helper()
		var out map[string]any
		if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096).Decode(&out); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return out
	}
	raw, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	values := decode("values.yaml", raw)
	raw, err = os.ReadFile(filepath.Join(chart, "templates", "_defaults.tpl"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(raw), "{{- define \"configstamp.defaultValues\" -}}\n")
	block, _, ok2 := strings.Cut(block, "{{- end }}")
	if !ok || !ok2 {
		t.Fatal("templates/_defaults.tpl defines no configstamp.defaultValues")
	}
	defaults := decode("configstamp.defaultValues", []byte(block))
	for _, k := range slices.Sorted(maps.Keys(values)) {
		if !reflect.DeepEqual(values[k], defaults[k]) {
			t.Errorf("%s: values.yaml has %v, templates/_defaults.tpl %v", k, values[k], defaults[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(defaults)) {
		if _, ok := values[k]; !ok {
			t.Errorf("templates/_defaults.tpl has %s, values.yaml does not", k)
		}
	}
}
