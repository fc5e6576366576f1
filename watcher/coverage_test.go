package watcher

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/configstamp/configstamp/internal/decide"
	"github.com/configstamp/configstamp/stamp"
)

func registrationFor(uid string, created time.Time, resources ...string) *admissionregistrationv1.MutatingWebhookConfiguration {
	reg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{
		Name: "configstamp", UID: types.UID("uid-" + uid), CreationTimestamp: metav1.NewTime(created)}}
	for _, r := range resources {
		reg.Webhooks = append(reg.Webhooks, admissionregistrationv1.MutatingWebhook{Name: r + ".configstamp.io",
			Rules: []admissionregistrationv1.RuleWithOperations{{Rule: admissionregistrationv1.Rule{Resources: []string{r}}}}})
	}
	return reg
}

func coverageOf(t *testing.T, c client.Client) map[string]time.Time {
	t.Helper()
	var reg admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(context.Background(), client.ObjectKey{Name: "configstamp"}, &reg); err != nil {
		t.Fatal(err)
	}
	v, ok := reg.Annotations[stamp.CoverageAnnotation]
	if !ok {
		return nil
	}
	m := map[string]time.Time{}
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// The leader writes since when it covers each kind (once the registration has its
// entries) and Secrets, puts back what a whole-object replace dropped, and removes what
// it no longer covers; evidence reads Deployments' coverage from the registration's
// creation.
func TestCoverage(t *testing.T) {
	ctx := context.Background()
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := created.Add(time.Hour)
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(registrationFor("a", created, "deployments", "statefulsets")).Build()
	cov := newCoverage(c, c, registrationRecord("configstamp"), func(context.Context) (time.Time, error) { return now, nil })
	cov.cover("deployments", "statefulsets", "daemonsets", decide.CoverageSecrets)
	if _, err := cov.sync(ctx); err != nil {
		t.Fatal(err)
	}
	got := coverageOf(t, c)
	if len(got) != 2 || !got["statefulsets"].Equal(now) || !got[decide.CoverageSecrets].Equal(now) {
		t.Fatalf("coverage %v: want statefulsets and secrets at %v (no daemonsets entry in the registration yet; deployments implicit)", got, now)
	}
	if d, _ := ofOne(cov, ctx, "deployments"); !d.Equal(created) {
		t.Fatalf("deployments covered since %v, want the registration's creation %v", d, created)
	}
	if d, _ := ofOne(cov, ctx, "daemonsets"); !d.IsZero() {
		t.Fatalf("daemonsets covered since %v, want unknown", d)
	}

	// Replaced whole (the annotation dropped), a DaemonSet entry added: the remembered
	// times come back, the new kind gets the time it is first covered.
	var reg admissionregistrationv1.MutatingWebhookConfiguration
	_ = c.Get(ctx, client.ObjectKey{Name: "configstamp"}, &reg)
	reg.Annotations = nil
	reg.Webhooks = registrationFor("a", created, "deployments", "statefulsets", "daemonsets").Webhooks
	if err := c.Update(ctx, &reg); err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Hour)
	cov.serverNow = func(context.Context) (time.Time, error) { return later, nil }
	if _, err := cov.sync(ctx); err != nil {
		t.Fatal(err)
	}
	got = coverageOf(t, c)
	if !got["statefulsets"].Equal(now) || !got[decide.CoverageSecrets].Equal(now) || !got["daemonsets"].Equal(later) {
		t.Fatalf("after a replace: %v", got)
	}

	// Secrets turned off: its entry goes.
	cov.mu.Lock()
	delete(cov.wanted, decide.CoverageSecrets)
	cov.mu.Unlock()
	if _, err := cov.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got = coverageOf(t, c); len(got) != 2 || !got[decide.CoverageSecrets].IsZero() {
		t.Fatalf("Secrets off: %v", got)
	}

	// A re-created registration (another UID, created later): nothing remembered
	// carries over, and no time is before its creation.
	if err := c.Delete(ctx, &reg); err != nil {
		t.Fatal(err)
	}
	recreated := later.Add(time.Hour)
	fresh := registrationFor("b", recreated, "deployments", "statefulsets", "daemonsets")
	fresh.Annotations = map[string]string{stamp.CoverageAnnotation: `{"statefulsets":"2026-01-01T00:00:00Z"}`}
	if err := c.Create(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if s, _ := ofOne(cov, ctx, "statefulsets"); !s.Equal(recreated) {
		t.Fatalf("statefulsets since %v, want no earlier than the registration's creation %v", s, recreated)
	}
	cov.serverNow = func(context.Context) (time.Time, error) { return recreated.Add(time.Minute), nil }
	if _, err := cov.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got = coverageOf(t, c); !got["daemonsets"].Equal(recreated.Add(time.Minute)) {
		t.Fatalf("re-created: daemonsets %v, want the time it was first covered under the new registration", got["daemonsets"])
	}
}

func ofOne(c *coverage, ctx context.Context, key string) (time.Time, error) {
	t, err := c.ofAll(ctx, key)
	return t[0], err
}

// A namespaced install keeps coverage on its ConfigMap: every kind counts as registered,
// Deployments since the ConfigMap's creation; each watched namespace since it is.
func TestCoverageConfigMap(t *testing.T) {
	ctx := context.Background()
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := created.Add(time.Hour)
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "configstamp-system", Name: "configstamp-coverage", CreationTimestamp: metav1.NewTime(created)}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cm).Build()
	cov := newCoverage(c, c, configMapRecord(client.ObjectKeyFromObject(cm)), func(context.Context) (time.Time, error) { return now, nil })
	cov.cover("deployments", "statefulsets", decide.CoverageNamespace("a"))
	if pending, err := cov.sync(ctx); err != nil || pending {
		t.Fatalf("sync: pending %v, %v", pending, err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
		t.Fatal(err)
	}
	if got, want := cm.Annotations[stamp.CoverageAnnotation], `{"namespace/a":"2026-01-01T01:00:00Z","statefulsets":"2026-01-01T01:00:00Z"}`; got != want {
		t.Fatalf("coverage annotation %q, want %q", got, want)
	}
	if d, _ := ofOne(cov, ctx, "deployments"); !d.Equal(created) {
		t.Fatalf("deployments covered since %v, want the ConfigMap's creation %v", d, created)
	}
}
