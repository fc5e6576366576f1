package watcher

import (
	"context"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/stamp"
)

// A check that meets a record made under another key than the watcher's reads its key
// again first: under the record's key (the watcher's was stale) the workload is
// current; if the key cannot be read now, the check is retried (key_mismatch), never
// rolled on the mismatch alone, with one HashKeyMismatch Event after maxBypassRetries;
// under a key read a moment ago that is not the record's, the record predates the
// rotation and the nudge, naming that key, rolls it once.
func TestCheckRecordUnderAnotherKey(t *testing.T) {
	keyA, keyB := testKey(), []byte("fedcba9876543210fedcba9876543210")
	ctx := context.Background()
	// app is stamped and recorded, under key A, with the config as it is.
	seed := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(cfgMap("1")).Build()
	dep := cfgDeployment()
	underA, err := (&configread.Reader{Client: seed, Key: func() []byte { return keyA }}).Stamp(ctx, "ns",
		stamp.Consumed(nil, &dep.Spec.Template.Spec, stamp.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	dep.Spec.Template.Annotations = map[string]string{stamp.HashAnnotation: underA.Hash, stamp.SourcesAnnotation: underA.SourcesAnnotation()}
	dep.Annotations = map[string]string{stamp.ObservedAnnotation: stamp.Observed{Hash: underA.Hash, Template: stamp.TemplateFingerprint(&dep.Spec.Template), Key: underA.Key}.String()}

	for _, tc := range []struct {
		name string
		// reread is the key a read of the Secret finds (nil: it cannot be read now).
		reread []byte
		checks int

		result      string
		nudge       string // the nudge's marker ("": no nudge)
		retried     bool
		mismatchEvt bool
	}{
		{name: "the watcher's key was stale: current", reread: keyA, checks: 1, result: "current"},
		{name: "the key cannot be read now: retried, not rolled", checks: 1, result: "key_mismatch", retried: true},
		{name: "still not readable after maxBypassRetries: one HashKeyMismatch Event", checks: maxBypassRetries + 1, result: "key_mismatch", mismatchEvt: true},
		{name: "the record predates the rotation: one nudge under the fresh key", reread: keyB, checks: 1, result: "bypassed",
			nudge: stamp.NudgeFor(stamp.KeyFingerprint(keyB)), retried: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var nudges []string
			c := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(optedInNamespace(), cfgMap("1"), dep.DeepCopy()).
				WithInterceptorFuncs(interceptor.Funcs{
					Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
						data, _ := patch.Data(obj)
						nudges = append(nudges, string(data))
						return c.Patch(ctx, obj, patch, opts...)
					},
				}).Build()
			r, rec := newTestReconciler(t, c)
			key := keyB // the watcher's, before any read
			r.config.Key = func() []byte { return key }
			r.freshKey = func(context.Context, time.Time) bool {
				if tc.reread == nil {
					return false
				}
				key = tc.reread
				return true
			}
			counted := checksCounted(tc.result)
			var res reconcile.Result
			for range tc.checks {
				r.state.addTrigger(appKey, trigger{event: true})
				res, err = r.check(ctx, appKey, r.state.takeTrigger(appKey))
			}
			if got := checksCounted(tc.result) - counted; got < 1 {
				t.Errorf("checks_total{result=%q} rose by %v", tc.result, got)
			}
			if (err != nil) != tc.retried || (tc.mismatchEvt && res.RequeueAfter == 0) {
				t.Errorf("check: %v, %v; want retried %v", res, err, tc.retried)
			}
			switch {
			case tc.nudge == "" && len(nudges) > 0:
				t.Errorf("nudged: %q", nudges)
			case tc.nudge != "" && (len(nudges) != 1 || !strings.Contains(nudges[0], `"`+tc.nudge+`"`)):
				t.Errorf("nudges %q, want one marked %q", nudges, tc.nudge)
			}
			var events string
			for len(rec.Events) > 0 {
				events += <-rec.Events
			}
			if got := strings.Count(events, ReasonHashKeyMismatch); got != map[bool]int{true: 1}[tc.mismatchEvt] {
				t.Errorf("events %q: %d %s, want %v", events, got, ReasonHashKeyMismatch, tc.mismatchEvt)
			}
		})
	}
}
