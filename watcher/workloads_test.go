package watcher

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/webhook"
)

func TestBypassRetriesAreBounded(t *testing.T) {
	rec := events.NewFakeRecorder(100)
	r := &workloadReconciler{kind: workload.Deployment, recorder: rec}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app"}}
	for i := 1; i <= maxBypassRetries; i++ {
		if err := r.bypassed(context.Background(), dep, "old", "new", "not called"); err == nil {
			t.Fatalf("attempt %d: no error, so no retry", i)
		}
	}
	if err := r.bypassed(context.Background(), dep, "old", "new", "not called"); err != nil {
		t.Fatalf("attempt %d: still retrying: %v", maxBypassRetries+1, err)
	}
	var last string
	for len(rec.Events) > 0 {
		last = <-rec.Events
	}
	if !strings.Contains(last, "left alone until its next change") {
		t.Fatalf("last event %q does not say it gave up", last)
	}
	// The count starts again: the next event gets a full set of retries.
	if err := r.bypassed(context.Background(), dep, "old", "new", "not called"); err == nil {
		t.Fatal("the count did not start again after giving up")
	}
}

func TestMinimumIntervalBetweenRollouts(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "app"}
	r := &workloadReconciler{kind: workload.Deployment, minInterval: time.Hour}
	if w := r.untilNextRoll(key); w != 0 {
		t.Fatalf("never rolled: wait %v", w)
	}
	r.rolled(key)
	if w := r.untilNextRoll(key); w <= 59*time.Minute {
		t.Fatalf("just rolled: wait %v, want about an hour", w)
	}
	if w := (&workloadReconciler{kind: workload.Deployment}).untilNextRoll(key); w != 0 {
		t.Fatalf("no interval: wait %v", w)
	}
}

// TestReconcileGivesUpOnABypass drives Reconcile as the workqueue does (a retry after
// every error): with no webhook to stamp the nudge, it retries a bounded number of times
// and then stops.
func TestReconcileGivesUpOnABypass(t *testing.T) {
	dep := staleDeployment()
	c := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(optedInNamespace(), cfgMap("2"), dep).Build()
	r, _ := newTestReconciler(t, c)
	key := appKey
	r.state.addTrigger(key, trigger{event: true})
	var errs int
	for i := 0; i < 3*maxBypassRetries; i++ {
		if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: key}); err != nil {
			errs++
			continue
		}
		break
	}
	if errs != maxBypassRetries {
		t.Fatalf("%d retries, want %d, then none", errs, maxBypassRetries)
	}
	// The next event starts a new round of retries.
	r.state.addTrigger(key, trigger{event: true})
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: key}); err == nil {
		t.Fatal("an event after giving up was not retried")
	}
}

// TestReconcileKeepsRetryingAnUnreadableConfig: a webhook that cannot read config keeps
// the stored stamp and says so in a warning. That is no bypass: no StampBypassed Event,
// and the change is never given up: retried with backoff, then about every unreadRetry
// with one ConfigUnreadable Event, until the webhook can read again. A nudge whose
// marker is removed with no such warning stays a bypass, retried a bounded number of
// times.
func TestReconcileKeepsRetryingAnUnreadableConfig(t *testing.T) {
	dep := staleDeployment()
	base := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(optedInNamespace(), cfgMap("2"), dep).Build()
	readable := false
	// The webhook's reads of config fail until readable; the watcher's own reads don't.
	webhookReads := interceptor.NewClient(base, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if !readable {
				return errors.New("context deadline exceeded")
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	c := interceptor.NewClient(base, withWebhook(t, &webhook.Stamper{Reader: webhookReads, Key: testKey}))
	r, rec := newTestReconciler(t, c)
	r.state.addTrigger(appKey, trigger{event: true})
	check := func() (reconcile.Result, error) {
		return r.Reconcile(context.Background(), reconcile.Request{NamespacedName: appKey})
	}
	for i := 1; i <= maxBypassRetries; i++ {
		if res, err := check(); err == nil || res.RequeueAfter != 0 {
			t.Fatalf("nudge %d: %v %+v, want an error (a retry with backoff)", i, err, res)
		}
	}
	for i := 0; i < 3; i++ {
		if res, err := check(); err != nil || res.RequeueAfter < unreadRetry || res.RequeueAfter > unreadRetry*6/5 {
			t.Fatalf("after %d nudges: %v %+v, want a retry in about %s", maxBypassRetries+1+i, err, res, unreadRetry)
		}
	}
	unreadable := 0
	for len(rec.Events) > 0 {
		e := <-rec.Events
		if strings.Contains(e, ReasonStampBypassed) {
			t.Errorf("event %q: a webhook that could not read config taken for a bypass", e)
		}
		if strings.Contains(e, ReasonConfigUnreadable) {
			unreadable++
		}
	}
	if unreadable != 1 {
		t.Errorf("%d ConfigUnreadable Events, want 1", unreadable)
	}
	readable = true
	if res, err := check(); err != nil || res.RequeueAfter != 0 {
		t.Fatalf("webhook reading again: %v %+v", err, res)
	}
	if got := getDep(t, c, appKey).Spec.Template.Annotations[stamp.HashAnnotation]; got == staleStamp {
		t.Fatal("not rolled once the webhook could read config")
	}
}

// A nudge whose marker something else removes, the webhook never stamping it and
// saying nothing, is a bypass: retried a bounded number of times, then left alone.
func TestReconcileMarkerRemovedWithoutAWord(t *testing.T) {
	dep := staleDeployment()
	base := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(optedInNamespace(), cfgMap("2"), dep).Build()
	c := interceptor.NewClient(base, interceptor.Funcs{Patch: stripMarker})
	r, rec := newTestReconciler(t, c)
	r.state.addTrigger(appKey, trigger{event: true})
	errs := 0
	for i := 0; i < 3*maxBypassRetries; i++ {
		res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: appKey})
		if res.RequeueAfter > 0 {
			t.Fatalf("a retry later (%v): taken for a webhook that could not read config", res.RequeueAfter)
		}
		if err == nil {
			break
		}
		errs++
	}
	if errs != maxBypassRetries {
		t.Errorf("%d retries, want %d, then none", errs, maxBypassRetries)
	}
	bypassed := 0
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, ReasonStampBypassed) && strings.Contains(e, "marker was removed") {
			bypassed++
		}
	}
	if bypassed == 0 {
		t.Error("no StampBypassed Event saying the marker was removed")
	}
}

// TestRecordConflictDecidedAgainLive: a record write is conditional on the
// resourceVersion its decision was made on; under a competing writer it conflicts. The
// check decides again at once on a live read, up to recordAttempts records in all, and
// only then fails (a retry with backoff), counted once as an error.
func TestRecordConflictDecidedAgainLive(t *testing.T) {
	cm := cfgMap("1")
	current, err := (&configread.Reader{Client: fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(cm).Build(), Key: testKey}).Stamp(
		context.Background(), "ns", stamp.Consumed(nil, &cfgDeployment().Spec.Template.Spec, stamp.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	// Stamped with the current config, without a record: one is due.
	dep := cfgDeployment()
	dep.Spec.Template.Annotations = map[string]string{stamp.HashAnnotation: current.Hash, stamp.SourcesAnnotation: current.SourcesAnnotation()}
	for _, conflicts := range []int{2, 10} {
		t.Run(fmt.Sprintf("%d conflicts", conflicts), func(t *testing.T) {
			base := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(optedInNamespace(), cm, dep.DeepCopy()).Build()
			records := 0
			c := interceptor.NewClient(base, interceptor.Funcs{
				Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
					data, err := patch.Data(obj)
					if err != nil {
						return err
					}
					if !strings.Contains(string(data), stamp.ObservedAnnotation) {
						return c.Patch(ctx, obj, patch, opts...)
					}
					if records++; records > conflicts {
						return stripMarker(ctx, c, obj, patch, opts...)
					}
					// A competing writer got in first: the resourceVersion moves on.
					d := getDep(t, c, appKey)
					d.Labels = map[string]string{"write": strconv.Itoa(records)}
					if err := c.Update(ctx, d); err != nil {
						return err
					}
					return apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "deployments"}, obj.GetName(),
						errors.New("the object has been modified; please apply your changes to the latest version and try again"))
				},
			})
			r, _ := newTestReconciler(t, c)
			r.state.addTrigger(appKey, trigger{event: true})
			recorded, failed := checksCounted("recorded"), checksCounted("error")
			_, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: appKey})
			recordedBy, failedBy := checksCounted("recorded")-recorded, checksCounted("error")-failed
			_, has := getDep(t, c, appKey).Annotations[stamp.ObservedAnnotation]
			if conflicts < recordAttempts {
				if err != nil || !has || records != conflicts+1 {
					t.Fatalf("reconcile: %v, recorded %v after %d record writes: want recorded within one check, in %d", err, has, records, conflicts+1)
				}
				if recordedBy != 1 || failedBy != 0 {
					t.Errorf("checks_total rose by %v recorded, %v error: want 1, 0", recordedBy, failedBy)
				}
				return
			}
			if !apierrors.IsConflict(err) || has || records != recordAttempts {
				t.Fatalf("reconcile: %v, recorded %v after %d record writes: want the conflict after %d", err, has, records, recordAttempts)
			}
			if recordedBy != 0 || failedBy != 1 {
				t.Errorf("checks_total rose by %v recorded, %v error: want 0, 1", recordedBy, failedBy)
			}
		})
	}
}

// TestRecordPastTheWebhookIsWrittenAgain: a record write the webhook did not admit (down,
// or answering past the registration's timeout, failurePolicy Ignore) keeps its marker.
// That is a bypass: the check fails (a retry), and the retry writes the record again,
// through the webhook, even though the record stored already names the current config.
func TestRecordPastTheWebhookIsWrittenAgain(t *testing.T) {
	cm := cfgMap("1")
	current, err := (&configread.Reader{Client: fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(cm).Build(), Key: testKey}).Stamp(
		context.Background(), "ns", stamp.Consumed(nil, &cfgDeployment().Spec.Template.Spec, stamp.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	// Stamped with the current config, without a record: one is due.
	dep := cfgDeployment()
	dep.Spec.Template.Annotations = map[string]string{stamp.HashAnnotation: current.Hash, stamp.SourcesAnnotation: current.SourcesAnnotation()}
	base := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(optedInNamespace(), cm, dep).Build()
	webhookUp, lagging, records := false, true, 0
	c := interceptor.NewClient(base, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			records++
			if webhookUp {
				return stripMarker(ctx, c, obj, patch, opts...)
			}
			if lagging { // a replica that cannot place the namespace yet: the marker stays, with a warning
				addWarning(ctx, stamp.WarningScopeUnknown+" (test)")
			}
			return c.Patch(ctx, obj, patch, opts...) // not admitted: the marker stays
		},
	})
	r, rec := newTestReconciler(t, c)
	r.state.addTrigger(appKey, trigger{event: true})
	bypassesBefore := counterValue(bypasses)
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: appKey}); err == nil {
		t.Fatal("a record write a lagging replica did not admit taken as done: no retry")
	}
	if len(rec.Events) > 0 || counterValue(bypasses) != bypassesBefore {
		t.Fatalf("a lagging replica's answer reported as a bypass (%d Events)", len(rec.Events))
	}
	lagging = false
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: appKey}); err == nil {
		t.Fatal("a record write past the webhook taken as done: no retry")
	}
	if a := getDep(t, c, appKey).Annotations; a[stamp.NudgeAnnotation] != stamp.NudgeRecord || a[stamp.ObservedAnnotation] == "" {
		t.Fatalf("setup: want the record and its marker stored past the webhook, got %v", a)
	}
	if e := <-rec.Events; !strings.Contains(e, ReasonStampBypassed) || !strings.Contains(e, "record write") {
		t.Errorf("Event %q: want a StampBypassed Event about the record write", e)
	}
	webhookUp = true
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: appKey}); err != nil {
		t.Fatalf("retry: %v", err)
	}
	a := getDep(t, c, appKey).Annotations
	if _, marked := a[stamp.NudgeAnnotation]; marked || records != 3 {
		t.Fatalf("after the retry: %d record writes, annotations %v: want the record written again through the webhook, its marker gone", records, a)
	}
}

// counterValue reads a counter.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// checksCounted reads configstamp_checks_total for one result (prometheus/testutil
// would add a dependency).
func checksCounted(result string) float64 {
	var m dto.Metric
	if err := checks.WithLabelValues(result).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
