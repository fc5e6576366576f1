package webhook

import (
	"strings"
	"testing"

	"github.com/configstamp/configstamp/internal/workload"
)

// Every kind's condition names its template path and the opt-in label; a template path
// CEL cannot select is refused when the registration is built, not by the API server.
func TestMatchConditions(t *testing.T) {
	for _, k := range append(workload.Builtin(), workload.Rollout) {
		mc := MatchConditions(k, "example.com/opt-in")
		if len(mc) != 1 || mc[0].Name != MatchConditionName {
			t.Fatalf("%s: %+v", k, mc)
		}
		e := mc[0].Expression
		for _, want := range []string{
			"request.operation != 'UPDATE' || (has(object.metadata.annotations) && 'configstamp.io/nudge' in object.metadata.annotations) || ",
			"object.spec.template != oldObject.spec.template",
			"k.startsWith('configstamp.io/')",
			"object.metadata.labels['example.com/opt-in']",
		} {
			if !strings.Contains(e, want) {
				t.Errorf("%s: %q lacks %q", k, e, want)
			}
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("a path segment with a dash was accepted")
		}
	}()
	templateChanged("/spec/job-template")
}
