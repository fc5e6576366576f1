package webhook

import (
	"strings"
	"testing"

	"github.com/configstamp/configstamp/internal/workload"
)

// Every kind's condition names its template path, each of configstamp's annotations by
// key (no scan of all the workload's annotations: the cost stays flat) and the opt-in
// label; a Deployment's also its resume. A path CEL cannot select is refused when the
// registration is built, not by the API server.
func TestMatchConditions(t *testing.T) {
	for _, k := range append(workload.Builtin(), workload.Rollout) {
		mc := MatchConditions(k, "example.com/opt-in")
		if len(mc) != 1 || mc[0].Name != MatchConditionName {
			t.Fatalf("%s: %+v", k, mc)
		}
		e := mc[0].Expression
		for _, want := range []string{
			"request.operation != 'UPDATE' || (has(object.metadata.annotations) && 'configstamp.io/nudge' in object.metadata.annotations) || ",
			"object" + strings.ReplaceAll(k.TemplatePath(), "/", ".") + " != oldObject" + strings.ReplaceAll(k.TemplatePath(), "/", "."),
			"object.metadata.annotations['configstamp.io/observed'] != oldObject.metadata.annotations['configstamp.io/observed']",
			"object.metadata.annotations['configstamp.io/skip']",
			"object.metadata.annotations['configstamp.io/extra-sources']",
			"object.metadata.labels['example.com/opt-in']",
		} {
			if !strings.Contains(e, want) {
				t.Errorf("%s: %q lacks %q", k, e, want)
			}
		}
		if strings.Contains(e, ".exists(") {
			t.Errorf("%s: scans every annotation: %q", k, e)
		}
		if resume := "oldObject.spec.paused == true"; strings.Contains(e, resume) != (k == workload.Deployment) {
			t.Errorf("%s: resume clause %v", k, strings.Contains(e, resume))
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("a path segment with a dash was accepted")
		}
	}()
	fields("/spec/job-template")
}
