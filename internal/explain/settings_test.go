package explain

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/configstamp/configstamp/internal/argo"
	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := argo.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// noSourceReads fails every read of a ConfigMap or Secret and every create (the
// webhook's dry-run), counting them in *n.
func noSourceReads(n *int) interceptor.Funcs {
	return interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			switch obj.(type) {
			case *corev1.ConfigMap, *corev1.Secret:
				*n++
				return apierrors.NewInternalError(errors.New("read"))
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			*n++
			return apierrors.NewInternalError(errors.New("read"))
		},
	}
}

// The entry checks come before any read of a source or a dry-run: a workload skipped,
// out of scope or past the source cap is decided without them; one that passes reads.
func TestGateBeforeReads(t *testing.T) {
	sc, err := scope.New(stamp.InjectLabel, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{stamp.InjectLabel: stamp.InjectValue}}}
	out := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "out"}}
	for _, tc := range []struct {
		name       string
		ns         *corev1.Namespace
		skip       bool
		maxSources int
		verdict    string
		reads      bool
	}{
		{name: "skipped", ns: in, skip: true, verdict: VerdictSkipped},
		{name: "out of scope", ns: out, verdict: VerdictNotInScope},
		{name: "too many sources", ns: in, maxSources: 1, verdict: VerdictTooManySources},
		{name: "passes", ns: in, reads: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := deployment() // two ConfigMaps
			d.Namespace = tc.ns.Name
			if tc.skip {
				d.Annotations[stamp.SkipAnnotation] = "true"
			}
			reads := 0
			cl := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(d, tc.ns).WithInterceptorFuncs(noSourceReads(&reads)).Build()
			c := &Cluster{Client: cl, Scope: sc, MaxSources: tc.maxSources, SecretsSet: true}
			r, err := c.Explain(context.Background(), workload.Deployment, d.Namespace, d.Name)
			if tc.reads {
				if err == nil || reads == 0 {
					t.Errorf("an in-scope workload: %d reads, err %v; want its sources read", reads, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Verdict != tc.verdict || reads != 0 {
				t.Errorf("got %s %q after %d source reads or creates, want %s after none", r.Verdict, r.Reason, reads, tc.verdict)
			}
		})
	}
}

// A namespaced install: in scope by the namespace list alone (no Namespace read, a
// label counts nowhere else), and the coverage read from the coverage ConfigMap.
func TestNamespacedInstall(t *testing.T) {
	sc, err := scope.NewWatched(stamp.InjectLabel, nil, []string{"team"})
	if err != nil {
		t.Fatal(err)
	}
	forbidNamespaces := interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*corev1.Namespace); ok {
			t.Errorf("read namespace %s", key.Name)
			return apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, key.Name, nil)
		}
		return c.Get(ctx, key, obj, opts...)
	}}
	rollout := func(ns string, labelled bool) *argo.Rollout {
		ro := &argo.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "canary"}}
		if labelled {
			ro.Labels = map[string]string{stamp.InjectLabel: stamp.InjectValue}
		}
		ro.Spec.Template.Spec.Containers = []corev1.Container{{Name: "c"}}
		return ro
	}
	coverage := func(v string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "cs", Name: "coverage", Annotations: map[string]string{stamp.CoverageAnnotation: v}}}
	}
	for _, tc := range []struct {
		name, ns, coverage string
		labelled           bool
		verdict            string
	}{
		{name: "watched, rollouts covered", ns: "team", coverage: `{"rollouts":"2026-01-01T00:00:00Z"}`, verdict: VerdictNoSources},
		{name: "watched, rollouts not covered", ns: "team", coverage: `{}`, verdict: VerdictNotInScope},
		{name: "not watched, labelled", ns: "other", labelled: true, coverage: `{"rollouts":"2026-01-01T00:00:00Z"}`, verdict: VerdictNotInScope},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(rollout(tc.ns, tc.labelled), coverage(tc.coverage)).
				WithInterceptorFuncs(forbidNamespaces).Build()
			c := &Cluster{Client: cl, Scope: sc, CoverageConfigMap: types.NamespacedName{Namespace: "cs", Name: "coverage"}}
			r, err := c.Explain(context.Background(), workload.Rollout, tc.ns, "canary")
			if err != nil {
				t.Fatal(err)
			}
			if r.Verdict != tc.verdict {
				t.Errorf("got %s %q, want %s", r.Verdict, r.Reason, tc.verdict)
			}
		})
	}
}

// With Secrets off, a Secret neither counts toward the cap nor rolls anything.
func TestImpactSecretsOff(t *testing.T) {
	d := deployment() // configmap/app, configmap/files
	d.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}}}
	for _, tc := range []struct {
		kind, name string
		secrets    bool
		roll       bool
		reason     string
	}{
		{kind: stamp.KindConfigMap, name: "app", roll: true, reason: "a change of a key it consumes rolls it"},
		{kind: stamp.KindSecret, name: "db", reason: "Secrets are not hashed"},
		{kind: stamp.KindConfigMap, name: "app", secrets: true, reason: "consumes 3 sources, more than configstamp's cap of 2"},
	} {
		secrets := tc.secrets
		r := Impact(tc.kind, "ns", tc.name, "", false, false, stamp.Options{MaxSources: 2},
			[]Candidate{{Kind: workload.Deployment, Object: d, InScope: true, Secrets: &secrets}})
		if len(r.Workloads) != 1 || r.Workloads[0].Roll != tc.roll || !strings.HasPrefix(r.Workloads[0].Reason, tc.reason) {
			t.Errorf("%s/%s, secrets %v: %+v, want roll %v %q", tc.kind, tc.name, tc.secrets, r.Workloads, tc.roll, tc.reason)
		}
	}
}

// A Rollout with a workloadRef gets the referenced Deployment's verdict; one naming a
// kind configstamp does not stamp has no template.
func TestWorkloadRef(t *testing.T) {
	sc, err := scope.New(stamp.InjectLabel, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := deployment()
	d.Annotations[stamp.SkipAnnotation] = "true"
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{stamp.InjectLabel: stamp.InjectValue}}}
	ro := func(name string, ref argo.WorkloadRef) *argo.Rollout {
		return &argo.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: argo.RolloutSpec{WorkloadRef: &ref}}
	}
	cl := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(d, ns,
		ro("ref", argo.WorkloadRef{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name}),
		ro("odd", argo.WorkloadRef{APIVersion: "v1", Kind: "PodTemplate", Name: "tmpl"}),
		ro("gone", argo.WorkloadRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "gone"})).Build()
	c := &Cluster{Client: cl, Scope: sc}
	r, err := c.Explain(context.Background(), workload.Rollout, "ns", "ref")
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != "rollout" || r.Name != "ref" || r.TemplateOf != "deployment/web" || r.Verdict != VerdictSkipped ||
		!strings.HasPrefix(r.Reason, "its pod template is deployment/web's (spec.workloadRef)") {
		t.Errorf("workloadRef to a Deployment: %s/%s of %q: %s %q", r.Kind, r.Name, r.TemplateOf, r.Verdict, r.Reason)
	}
	if r, err := c.Explain(context.Background(), workload.Rollout, "ns", "odd"); err != nil || r.Verdict != VerdictNoTemplate || !strings.Contains(r.Reason, "PodTemplate") {
		t.Errorf("workloadRef to a PodTemplate: %s %q %v", r.Verdict, r.Reason, err)
	}
	if _, err := c.Explain(context.Background(), workload.Rollout, "ns", "gone"); err == nil || !strings.Contains(err.Error(), "deployment/gone not found") {
		t.Errorf("workloadRef to a missing Deployment: %v", err)
	}
}

// The webhook's dry-run is bounded by its own timeout, and says so.
func TestDryRunTimeout(t *testing.T) {
	d := deployment()
	cl := fake.NewClientBuilder().WithScheme(testScheme(t)).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, _ client.WithWatch, _ client.Object, _ ...client.CreateOption) error {
			<-ctx.Done() // a webhook that hangs
			return ctx.Err()
		}}).Build()
	c := &Cluster{Client: cl, DryRunTimeout: 50 * time.Millisecond}
	refs := stamp.Consumed(d.Annotations, &d.Spec.Template.Spec, stamp.Options{})
	// A generous outer deadline: without its own timeout, the dry-run would end on this
	// one, with another message.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := c.dryRunStamp(ctx, workload.Deployment, d, refs, nil)
	if err == nil || !strings.Contains(err.Error(), "no answer within 50ms (--dry-run-timeout)") {
		t.Errorf("got %v", err)
	}
}
