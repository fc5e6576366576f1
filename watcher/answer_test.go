package watcher

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/stamp"
)

// TestNudgeAnswers pins how each answer of the webhook to a nudge is taken: the result
// it counts in checks_total, whether the check is retried (an error) and the Event.
func TestNudgeAnswers(t *testing.T) {
	cfgHash := func(v string) string {
		c := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(cfgMap(v)).Build()
		st, err := (&configread.Reader{Client: c, Key: testKey}).Stamp(context.Background(), "ns", stamp.Consumed(nil, &cfgDeployment().Spec.Template.Spec, stamp.Options{}))
		if err != nil {
			t.Fatal(err)
		}
		return st.Hash
	}
	one, two, old := cfgHash("1"), cfgHash("2"), strings.Repeat("a", 64)
	cases := []struct {
		name string
		// The config the check read, the template's stamp and restart time before and
		// after the nudge; the config now ("": missing).
		want, before, after   string
		restart, restarted    bool
		now                   string
		marked, unreadWarning bool
		scopeWarning          bool
		otherKeyWarning       bool
		record, pad           bool
		result, event         string
		retried               bool
	}{
		{name: "not called", want: one, before: old, after: old, marked: true, now: "1", result: "bypassed", event: ReasonStampBypassed, retried: true},
		{name: "rolled", want: one, before: old, after: one, now: "1", result: "nudged", event: ReasonConfigChanged},
		{name: "restarted", want: one, before: one, after: one, restart: true, restarted: true, now: "1", result: "nudged", event: ReasonConfigChanged},
		{name: "moved on", want: one, before: old, after: two, now: "2", result: "nudged", event: ReasonConfigChanged},
		{name: "nothing to do", want: one, before: one, after: one, now: "1", result: "current"},
		{name: "kept: config as the stamp names it", want: two, before: one, after: one, now: "1", result: "current"},
		{name: "kept: config missing", want: two, before: one, after: one, now: "", result: "current"},
		{name: "kept: changed back", want: two, before: old, after: old, record: true, now: "1", result: "current"},
		{name: "kept: too large", want: two, before: old, after: old, pad: true, now: "2", result: "too_large", event: ReasonStampTooLarge},
		{name: "kept: unread", want: two, before: old, after: old, unreadWarning: true, now: "2", result: "unread", retried: true},
		{name: "not placed: a lagging replica's namespace cache", want: one, before: old, after: old, marked: true, scopeWarning: true, now: "1", result: "unread", retried: true},
		{name: "kept: the replica holds another hash key", want: two, before: old, after: old, otherKeyWarning: true, now: "2", result: "key_mismatch", retried: true},
		{name: "kept: no word why", want: two, before: old, after: old, now: "2", result: "bypassed", event: ReasonStampBypassed, retried: true},
		{name: "restart not set: config missing", want: one, before: one, after: one, restart: true, now: "", result: "current"},
		{name: "restart not set: changed back", want: one, before: one, after: one, restart: true, record: true, now: "2", result: "current"},
		// Unlike a kept stale stamp, config as the stamp names it, or no room for the
		// stamp's sources, is no reason here.
		{name: "restart not set: no word why", want: one, before: one, after: one, restart: true, now: "1", result: "bypassed", event: ReasonStampBypassed, retried: true},
		{name: "restart not set: no room", want: one, before: one, after: one, restart: true, pad: true, now: "1", result: "bypassed", event: ReasonStampBypassed, retried: true},
		{name: "restart not set: unread", want: one, before: one, after: one, restart: true, unreadWarning: true, now: "1", result: "unread", retried: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := []client.Object{optedInNamespace()}
			if tc.now != "" {
				objs = append(objs, cfgMap(tc.now))
			}
			// The webhook's answer: the workload as the patch returns it, and its warning.
			answer := func(ctx context.Context, obj client.Object) {
				dep := obj.(*appsv1.Deployment)
				cfgDeployment().DeepCopyInto(dep) // the workload as stored
				tmpl := &dep.Spec.Template
				tmpl.Annotations = map[string]string{stamp.HashAnnotation: tc.after}
				if tc.restarted {
					tmpl.Annotations[stamp.RestartedAnnotation] = "now"
				}
				if tc.pad { // it fits with its stamp, not with the stamp's sources besides
					tmpl.Annotations["pad"] = strings.Repeat("x", stamp.AnnotationSizeLimit-len("pad")-len(stamp.HashAnnotation)-len(tc.after))
				}
				dep.Annotations = map[string]string{}
				if tc.marked {
					dep.Annotations[stamp.NudgeAnnotation] = "true"
				}
				if tc.record { // the pods run the config now: it changed back
					ran := two
					if tc.now == "1" {
						ran = one
					}
					dep.Annotations[stamp.ObservedAnnotation] = stamp.Observed{Hash: ran, Template: stamp.TemplateFingerprint(tmpl)}.String()
				}
				if tc.unreadWarning {
					addWarning(ctx, stamp.WarningUnreadConfig+": timeout")
				}
				if tc.otherKeyWarning {
					addWarning(ctx, stamp.OtherKeyWarning("Deployment", "aaaaaaaaaaaa", "bbbbbbbbbbbb"))
				}
				if tc.scopeWarning {
					addWarning(ctx, stamp.WarningScopeUnknown+" (not synced)")
				}
			}
			c := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
				Patch: func(ctx context.Context, _ client.WithWatch, obj client.Object, _ client.Patch, _ ...client.PatchOption) error {
					answer(ctx, obj)
					return nil
				},
			}).Build()
			r, rec := newTestReconciler(t, c)
			dep := cfgDeployment()
			dep.Spec.Template.Annotations = map[string]string{stamp.HashAnnotation: tc.before}
			counted := checksCounted(tc.result)
			_, err := r.nudge(context.Background(), dep, stamp.Stamp{Hash: tc.want}, tc.before, "", tc.restart)
			if got := checksCounted(tc.result) - counted; got != 1 {
				t.Errorf("checks_total{result=%q} rose by %v, want 1", tc.result, got)
			}
			if (err != nil) != tc.retried {
				t.Errorf("error %v, want retried %v", err, tc.retried)
			}
			var event string
			for len(rec.Events) > 0 {
				event += <-rec.Events
			}
			if tc.event == "" && event != "" || !strings.Contains(event, tc.event) {
				t.Errorf("events %q, want %q", event, tc.event)
			}
		})
	}
}
