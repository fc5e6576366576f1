package watcher

import (
	"testing"

	"github.com/configstamp/configstamp/internal/decide"
	"github.com/configstamp/configstamp/stamp"
)

func TestCounted(t *testing.T) {
	key := func() []byte { return []byte("k") }
	names := func(opts Options) []string {
		ks, err := counted(opts)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, k := range ks {
			out = append(out, k.Name)
		}
		return out
	}
	if got := names(Options{Key: key}); len(got) != 1 || got[0] != stamp.KindConfigMap {
		t.Errorf("without Secrets: %v, want ConfigMaps alone", got)
	}
	if got := names(Options{Sources: stamp.Options{Secrets: true}, Key: key}); len(got) != 2 || got[1] != stamp.KindSecret {
		t.Errorf("with Secrets: %v, want ConfigMaps and Secrets", got)
	}
	if _, err := counted(Options{}); err == nil || err.Error() != "watcher: no hash key" {
		t.Errorf("without a key: %v", err)
	}
	if !sourceCoverage(decide.CoverageSecrets) || sourceCoverage("deployments") || sourceCoverage("") {
		t.Errorf("Secrets' coverage key %q not a source kind's, or deployments one", decide.CoverageSecrets)
	}
}
