package watcher

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/stamp"
)

// A nudge the webhook answers by keeping what is stored (the config changed back, between
// the check and the nudge, to what the pods' certain record says they run) leaves the
// stale stamp in place: that is no bypass. Nor, when the nudge was for a restart (the
// stamp already named the config the check read), an error to retry.
func TestNudgeKeptByTheWebhookIsNoBypass(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(map[bool]string{false: "stale stamp", true: "restart"}[restart], func(t *testing.T) { nudgeKept(t, restart) })
	}
}

func nudgeKept(t *testing.T, restart bool) {
	scheme := testScheme()
	cm := cfgMap("1")
	dep := cfgDeployment()
	base := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cm).Build()
	ran, err := (&configread.Reader{Client: base, Key: testKey}).Stamp(context.Background(), "ns", stamp.Consumed(nil, &dep.Spec.Template.Spec, stamp.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	changed := cm.DeepCopy()
	changed.Data["k"] = "2"          // what the watcher's check reads
	stale := strings.Repeat("a", 64) // a stamp made for another template
	if restart {
		// The stamp names the config the check reads: the nudge asks for a restart.
		read, err := (&configread.Reader{Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(changed).Build(), Key: testKey}).Stamp(context.Background(), "ns",
			stamp.Consumed(nil, &dep.Spec.Template.Spec, stamp.Options{}))
		if err != nil {
			t.Fatal(err)
		}
		stale = read.Hash
	}
	dep.Spec.Template.Annotations = map[string]string{stamp.HashAnnotation: stale}
	dep.Annotations = map[string]string{stamp.ObservedAnnotation: stamp.Observed{Hash: ran.Hash, Template: stamp.TemplateFingerprint(&dep.Spec.Template)}.String()}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(optedInNamespace(), changed, dep).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			// The config changes back before the nudge reaches the webhook, which keeps
			// what is stored and strips the marker.
			back := &corev1.ConfigMap{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(cm), back); err != nil {
				return err
			}
			back.Data = cm.Data
			if err := c.Update(ctx, back); err != nil {
				return err
			}
			return stripMarker(ctx, c, obj, patch, opts...)
		},
	}).Build()
	r, rec := newTestReconciler(t, c)
	key := appKey
	r.state.addTrigger(key, trigger{event: true, changed: true})
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: key}); err != nil {
		t.Errorf("reconcile: %v", err)
	}
	nudged := false
	for len(rec.Events) > 0 {
		e := <-rec.Events
		if strings.Contains(e, ReasonStampBypassed) {
			t.Errorf("event %q: a kept nudge taken for a bypass", e)
		}
		nudged = nudged || strings.Contains(e, ReasonConfigChanged)
	}
	if nudged {
		t.Errorf("a kept nudge reported as a rollout (ConfigChanged)")
	}
	if got := getDep(t, c, key); got.Spec.Template.Annotations[stamp.HashAnnotation] != stale {
		t.Errorf("stamp %q", got.Spec.Template.Annotations[stamp.HashAnnotation])
	}
}
