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
	"github.com/configstamp/configstamp/webhook"
)

// TestReadTimeoutsAreBounded: a check whose own config reads run past their deadline
// (here: every read hangs until it) is retried with backoff maxBypassRetries times, then
// reported once (ConfigReadTimeout) and left alone: no retry of its own, no error. The
// re-check's retry of it tries once, quietly (no new Event); a new event gives it a full
// round again; once the reads answer, it rolls.
func TestReadTimeoutsAreBounded(t *testing.T) {
	ctx := context.Background()
	base := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(optedInNamespace(), cfgMap("2"), staleDeployment()).Build()
	slow := true
	reads := interceptor.NewClient(base, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if slow && key.Name == "cfg" {
				<-ctx.Done()
				return ctx.Err()
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	c := interceptor.NewClient(base, withWebhook(t, &webhook.Stamper{Reader: base, Key: testKey}))
	r, rec := newTestReconciler(t, c)
	r.config = &configread.Reader{Client: reads, Key: testKey, Timeout: 10 * time.Millisecond}
	check := func(tr trigger) (reconcile.Result, error) {
		r.state.addTrigger(appKey, tr)
		return r.Reconcile(ctx, reconcile.Request{NamespacedName: appKey})
	}
	events := func() (timeouts int) {
		for len(rec.Events) > 0 {
			if e := <-rec.Events; strings.Contains(e, ReasonConfigReadTimeout) {
				timeouts++
			}
		}
		return timeouts
	}
	round := func(what string, tr trigger) {
		t.Helper()
		for i := 1; i <= maxBypassRetries; i++ {
			if res, err := check(tr); err == nil || res.RequeueAfter != 0 {
				t.Fatalf("%s, try %d: %v %+v, want an error (a retry with backoff)", what, i, err, res)
			}
			tr = trigger{} // the retries
		}
		if res, err := check(trigger{}); err != nil || res.RequeueAfter != 0 || !r.state.isAbandoned(appKey) {
			t.Fatalf("%s, past the retries: %v %+v, abandoned %v; want left alone", what, err, res, r.state.isAbandoned(appKey))
		}
		if n := events(); n != 1 {
			t.Fatalf("%s: %d ConfigReadTimeout Events, want 1", what, n)
		}
	}
	round("first event", trigger{event: true})
	for pass := 1; pass <= 2; pass++ {
		if res, err := check(trigger{recheck: true}); err != nil || res.RequeueAfter != 0 || !r.state.isAbandoned(appKey) {
			t.Fatalf("re-check %d: %v %+v, want one quiet try, left alone again", pass, err, res)
		}
		if n := events(); n != 0 {
			t.Fatalf("re-check %d: %d new Events", pass, n)
		}
	}
	round("next event", trigger{event: true})
	slow = false
	if res, err := check(trigger{recheck: true}); err != nil || res.RequeueAfter != 0 {
		t.Fatalf("reads answering: %v %+v", err, res)
	}
	if got := getDep(t, c, appKey).Spec.Template.Annotations[stamp.HashAnnotation]; got == staleStamp {
		t.Fatal("not rolled once its config could be read")
	}
}
