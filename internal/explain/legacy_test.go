package explain

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// A workload stamped by the predecessor (unkeyed ConfigMap digests, configstamp/v1),
// its config unchanged: explain says it is stamped with an older encoding and rolls
// once, not "config changed"; a stamp of today's encoding is up to date, and one whose
// digests match neither is a change.
func TestLegacyStamp(t *testing.T) {
	content := map[string]*corev1.ConfigMap{"configmap/app": cm("app", map[string]string{"a": "1"}), "configmap/files": cm("files", map[string]string{"f": "x"})}
	legacy := func() string {
		var parts []string
		for _, ref := range stamp.Consumed(nil, &deployment().Spec.Template.Spec, stamp.Options{}) {
			parts = append(parts, ref.ID()+"="+stamp.LegacyConfigMapDigest(ref, content[ref.ID()]).Hex()[:12])
		}
		return strings.Join(parts, ",")
	}
	for _, tc := range []struct {
		name, sources string
		verdict       string
		legacy        bool
	}{
		{"v1 stamp", legacy(), VerdictWouldRoll, true},
		{"v2 stamp", "", VerdictUpToDate, false},
		{"changed", "configmap/app=000000000000,configmap/files=000000000000", VerdictWouldRoll, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := deployment()
			stamped(t, d, content)
			if tc.sources != "" {
				d.Spec.Template.Annotations[stamp.HashAnnotation] = strings.Repeat("1", 64)
				d.Spec.Template.Annotations[stamp.SourcesAnnotation] = tc.sources
				d.Annotations[stamp.ObservedAnnotation] = stamp.Observed{Hash: strings.Repeat("1", 64), Template: stamp.TemplateFingerprint(&d.Spec.Template)}.String()
			}
			r := Explain(Input{Kind: workload.Deployment, Object: d, InScope: true, Live: live(t, d, content)})
			if r.Verdict != tc.verdict || strings.Contains(r.Reason, "older encoding") != tc.legacy {
				t.Errorf("got %s %q, want %s (older encoding: %v)", r.Verdict, r.Reason, tc.verdict, tc.legacy)
			}
		})
	}
}
