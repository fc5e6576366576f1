package watcher

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/webhook"
)

// withWebhook makes the fake API server call configstamp's webhook on a Deployment's
// patch, as the real one does: the patch applied, the webhook's JSON patch after it.
func withWebhook(t *testing.T, s *webhook.Stamper) interceptor.Funcs {
	return interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			old := &appsv1.Deployment{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), old); err != nil {
				return err
			}
			if err := c.Patch(ctx, obj, patch, opts...); err != nil {
				return err
			}
			raw := func(o client.Object) runtime.RawExtension {
				b, err := json.Marshal(o)
				if err != nil {
					t.Fatal(err)
				}
				return runtime.RawExtension{Raw: b}
			}
			resp := s.Handle(ctx, admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				UID: "uid", Kind: metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
				Operation: admissionv1.Update, Namespace: obj.GetNamespace(), Name: obj.GetName(), Object: raw(obj), OldObject: raw(old),
			}})
			if !resp.Allowed || len(resp.Patches) == 0 {
				t.Fatalf("webhook: allowed %v, patches %v", resp.Allowed, resp.Patches)
			}
			for _, w := range resp.Warnings { // the API server passes them to the client
				addWarning(ctx, w)
			}
			ops, err := json.Marshal(resp.Patches)
			if err != nil {
				t.Fatal(err)
			}
			return c.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, ops))
		},
	}
}

// The ConfigChanged Event of a nudge says what the change cause the webhook writes says
// (the Event without its "Rolled: ", the cause without its "configstamp: "): a restart is
// no "first stamp", and a record that says the pods ran other config than the stamp
// names gives the config hashes, naming no source diffed against the stale stamp.
func TestNudgeEventSaysTheChangeCause(t *testing.T) {
	scheme := testScheme()
	tmpl := cfgDeployment().Spec.Template
	of := func(v string) stamp.Stamp {
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cfgMap(v)).Build()
		st, err := (&configread.Reader{Client: c, Key: testKey}).Stamp(context.Background(), "ns", stamp.Consumed(nil, &tmpl.Spec, stamp.Options{}))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	digest := func(v string) string { return stamp.ParseSources(of(v).SourcesAnnotation())["configmap/cfg"] }
	h := func(v string) string { return stamp.ShortHash(of(v).Hash) }

	for _, tc := range []struct {
		name string
		// stamped and ran: the config the stamp names and the record says the pods run
		// ("": none); the config is "2" now.
		stamped, ran string
		want         string
	}{
		{"a source changed", "1", "1", "configmap/cfg changed (digest " + digest("1") + " -> " + digest("2") + "; keys: unknown)"},
		{"a source changed, no record", "1", "", "configmap/cfg changed (digest " + digest("1") + " -> " + digest("2") + "; keys: unknown)"},
		{"the record and the stamp disagree", "0", "1", "config changed (config hash " + h("1") + " -> " + h("2") + ")"},
		{"restart", "2", "1", "pods restarted onto the config their stamp names (config hash " + h("1") + " -> " + h("2") + ")"},
		{"adopted", "", "1", "config changed (config hash " + h("1") + " -> " + h("2") + "); first stamp (configmap/cfg " + digest("2") + ")"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dep := cfgDeployment()
			if tc.stamped != "" {
				st := of(tc.stamped)
				dep.Spec.Template.Annotations = map[string]string{stamp.HashAnnotation: st.Hash, stamp.SourcesAnnotation: st.SourcesAnnotation()}
			}
			if tc.ran != "" {
				dep.Annotations = map[string]string{stamp.ObservedAnnotation: stamp.Observed{Hash: of(tc.ran).Hash,
					Template: stamp.TemplateFingerprint(&dep.Spec.Template)}.String()}
			}
			base := fake.NewClientBuilder().WithScheme(scheme).WithObjects(optedInNamespace(), cfgMap("2"), dep).Build()
			c := interceptor.NewClient(base, withWebhook(t, &webhook.Stamper{Reader: base, Key: testKey}))
			key := appKey
			rec := checkChanged(t, c, key)
			got := getDep(t, c, key)
			if got.Spec.Template.Annotations[stamp.HashAnnotation] != of("2").Hash {
				t.Fatalf("not rolled: stamp %q", got.Spec.Template.Annotations[stamp.HashAnnotation])
			}
			cause := got.Annotations[stamp.ChangeCauseAnnotation]
			if cause != "configstamp: "+tc.want {
				t.Errorf("the webhook's cause %q, want %q", cause, "configstamp: "+tc.want)
			}
			var changed []string
			for len(rec.Events) > 0 {
				if e := <-rec.Events; strings.Contains(e, ReasonConfigChanged) {
					changed = append(changed, e)
				}
			}
			if want := "Normal " + ReasonConfigChanged + " Rolled: " + strings.TrimPrefix(cause, "configstamp: "); len(changed) != 1 || changed[0] != want {
				t.Errorf("events %q, want %q", changed, want)
			}
		})
	}
}

// checkChanged runs one check of the Deployment key after a live change of its config,
// as the watcher of Deployments with the default flags does, and returns its Events.
func checkChanged(t *testing.T, c client.Client, key types.NamespacedName) *events.FakeRecorder {
	t.Helper()
	r, rec := newTestReconciler(t, c)
	r.state.addTrigger(key, trigger{event: true, changed: true})
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: key}); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return rec
}

// A nudge during which the config moves on again: the webhook stamps what it reads,
// which is not what the check read. That is a rollout all the same: its Event says the
// cause the webhook wrote, and it counts for the minimum interval between rollouts.
func TestNudgeConfigMovedOn(t *testing.T) {
	scheme := testScheme()
	dep := cfgDeployment()
	c1 := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cfgMap("1")).Build()
	st, err := (&configread.Reader{Client: c1, Key: testKey}).Stamp(context.Background(), "ns", stamp.Consumed(nil, &dep.Spec.Template.Spec, stamp.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	dep.Spec.Template.Annotations = map[string]string{stamp.HashAnnotation: st.Hash, stamp.SourcesAnnotation: st.SourcesAnnotation()}
	dep.Annotations = map[string]string{stamp.ObservedAnnotation: stamp.Observed{Hash: st.Hash, Template: stamp.TemplateFingerprint(&dep.Spec.Template)}.String()}
	base := fake.NewClientBuilder().WithScheme(scheme).WithObjects(optedInNamespace(), cfgMap("2"), dep).Build()
	hook := withWebhook(t, &webhook.Stamper{Reader: base, Key: testKey})
	c := interceptor.NewClient(base, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			// The config changes again between the check and the webhook's read.
			if err := c.Update(ctx, cfgMap("3")); err != nil {
				return err
			}
			return hook.Patch(ctx, c, obj, patch, opts...)
		},
	})
	r, rec := newTestReconciler(t, c)
	r.minInterval = time.Hour
	r.state.addTrigger(appKey, trigger{event: true, changed: true})
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: appKey}); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	got := getDep(t, c, appKey)
	if got.Spec.Template.Annotations[stamp.HashAnnotation] == st.Hash {
		t.Fatal("not rolled")
	}
	var changed []string
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, ReasonConfigChanged) {
			changed = append(changed, e)
		}
	}
	cause := got.Annotations[stamp.ChangeCauseAnnotation]
	if want := "Normal " + ReasonConfigChanged + " Rolled: " + strings.TrimPrefix(cause, "configstamp: "); cause == "" || len(changed) != 1 || changed[0] != want {
		t.Errorf("events %q, want %q", changed, want)
	}
	if r.untilNextRoll(appKey) == 0 {
		t.Error("the rollout does not count for the minimum interval")
	}
}
