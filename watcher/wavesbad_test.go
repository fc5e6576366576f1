package watcher

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/configstamp/configstamp/internal/waves"
)

// A namespace's bad waves value is logged once, not once per source of it at each read;
// a source's once until it changes, or is fixed and turns bad again.
func TestLogBadOnce(t *testing.T) {
	var lines []string
	ctx := logf.IntoContext(context.Background(), funcr.New(func(_, args string) {
		lines = append(lines, args)
	}, funcr.Options{}))
	g := &wavesGate{}
	nsa := map[string]string{waves.ThresholdAnnotation: "many"}
	read := func(source string, src map[string]string) {
		_, problems := waves.Resolve(waves.Settings{Threshold: 5}, nil, nsa, src)
		g.logBad(ctx, "ns", source, problems)
	}
	for range 3 { // three evaluations of 100 sources, one of them bad itself
		for i := range 100 {
			src := map[string]string{}
			if i == 7 {
				src[waves.DeadlineAnnotation] = "1s"
			}
			read("configmap/c"+strings.Repeat("x", i), src)
		}
	}
	if len(lines) != 2 || !strings.Contains(lines[0], `"namespace"="ns"`) || !strings.Contains(lines[1], "1s") {
		t.Fatalf("logged %d lines, want the namespace's and the source's once each: %q", len(lines), lines)
	}
	read("configmap/c", map[string]string{waves.DeadlineAnnotation: "2s"}) // changed: logged
	read("configmap/c", nil)                                               // fixed
	read("configmap/c", map[string]string{waves.DeadlineAnnotation: "2s"}) // bad again: logged
	if len(lines) != 4 {
		t.Fatalf("logged %d lines, want 4: %q", len(lines), lines)
	}
}
