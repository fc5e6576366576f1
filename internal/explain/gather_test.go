package explain

import (
	"context"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

func registration(coverage string) *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "configstamp",
		Annotations: map[string]string{stamp.CoverageAnnotation: coverage}}}
}

// Whether Secrets count comes from the registration's coverage, not from the stamp
// (which is stale after Secrets are turned on or off).
func TestSecretsFromRegistration(t *testing.T) {
	withSecret := deployment()
	withSecret.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}}}}
	stale := withSecret.DeepCopy() // stamped while Secrets counted; turned off since
	stale.Spec.Template.Annotations = map[string]string{stamp.HashAnnotation: "x", stamp.SourcesAnnotation: "configmap/app=1,secret/creds=2"}
	for _, tc := range []struct {
		name    string
		reg     string // "" no registration
		flag    bool
		flagSet bool
		obj     client.Object
		want    bool
	}{
		{name: "on in the registration", reg: `{"deployments":"2026-01-01T00:00:00Z","secrets":"2026-01-01T00:00:00Z"}`, obj: withSecret, want: true},
		{name: "off in the registration, stamp holds Secrets", reg: `{"deployments":"2026-01-01T00:00:00Z"}`, obj: stale, flag: true, want: false},
		{name: "no registration, --secrets", obj: withSecret, flag: true, flagSet: true, want: true},
		{name: "no registration, stamp holds Secrets", obj: stale, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme)
			if tc.reg != "" {
				b = b.WithObjects(registration(tc.reg))
			}
			c := &Cluster{Client: b.Build(), Secrets: tc.flag, SecretsSet: tc.flagSet}
			tmpl := workload.Deployment.Template(tc.obj)
			if got := c.secretsCount(context.Background(), tc.obj, tmpl); got != tc.want {
				t.Errorf("secretsCount = %v, want %v", got, tc.want)
			}
		})
	}
}

// A namespace that can't be read: in scope only by the workload's own label outside
// the excluded namespaces; otherwise unknown, not "not in scope".
func TestScopeUnknown(t *testing.T) {
	sc, err := scope.New(stamp.InjectLabel, []string{"kube-system"})
	if err != nil {
		t.Fatal(err)
	}
	forbidNamespaces := interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*corev1.Namespace); ok {
			return apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, key.Name, nil)
		}
		return c.Get(ctx, key, obj, opts...)
	}}
	for _, tc := range []struct {
		name, ns string
		labelled bool
		verdict  string
	}{
		{name: "unlabelled", ns: "ns", verdict: VerdictUnknownScope},
		{name: "labelled", ns: "ns", labelled: true, verdict: VerdictHeld},
		{name: "labelled, excluded namespace", ns: "kube-system", labelled: true, verdict: VerdictNotInScope},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := deployment()
			d.Namespace = tc.ns
			if tc.labelled {
				d.Labels = map[string]string{stamp.InjectLabel: stamp.InjectValue}
			}
			cl := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(d).WithInterceptorFuncs(forbidNamespaces).Build()
			c := &Cluster{Client: cl, Scope: sc}
			r, err := c.Explain(context.Background(), workload.Deployment, tc.ns, d.Name)
			if err != nil {
				t.Fatal(err)
			}
			if r.Verdict != tc.verdict {
				t.Errorf("got %s %q, want %s", r.Verdict, r.Reason, tc.verdict)
			}
		})
	}
}

// A Rollout while the registration shows Rollouts are not covered (no --argo-rollouts).
func TestRolloutNotCovered(t *testing.T) {
	sc, err := scope.New(stamp.InjectLabel, nil)
	if err != nil {
		t.Fatal(err)
	}
	ro := &unstructured.Unstructured{}
	ro.SetAPIVersion("argoproj.io/v1alpha1")
	ro.SetKind("Rollout")
	ro.SetNamespace("ns")
	ro.SetName("canary")
	ro.SetLabels(map[string]string{stamp.InjectLabel: stamp.InjectValue})
	_ = unstructured.SetNestedMap(ro.Object, map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "c"}}}}, "spec", "template")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}
	for cov, want := range map[string]string{`{"rollouts":"2026-01-01T00:00:00Z"}`: VerdictNoSources, `{}`: VerdictNotInScope} {
		scheme := runtime.NewScheme()
		if err := clientgoscheme.AddToScheme(scheme); err != nil {
			t.Fatal(err)
		}
		if err := argo.AddToScheme(scheme); err != nil {
			t.Fatal(err)
		}
		cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(ro.DeepCopy(), ns, registration(cov)).Build()
		r, err := (&Cluster{Client: cl, Scope: sc}).Explain(context.Background(), workload.Rollout, "ns", "canary")
		if err != nil {
			t.Fatal(err)
		}
		if r.Verdict != want {
			t.Errorf("coverage %s: got %s %q, want %s", cov, r.Verdict, r.Reason, want)
		}
	}
}

// A Job is judged with its CronJob's skip (and extra sources), as the webhook stamped it,
// unless the CronJob is not the one its ownerReference names.
func TestJobTakesCronJobAnnotations(t *testing.T) {
	sc, err := scope.New(stamp.InjectLabel, nil)
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{stamp.InjectLabel: stamp.InjectValue}}}
	cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "nightly", UID: "u1",
		Annotations: map[string]string{stamp.SkipAnnotation: "true"}}}
	for uid, skipped := range map[types.UID]bool{"u1": true, "u2": false} {
		ref := metav1.NewControllerRef(cj, batchv1.SchemeGroupVersion.WithKind("CronJob"))
		ref.UID = uid
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "nightly-1", OwnerReferences: []metav1.OwnerReference{*ref}},
			Spec: batchv1.JobSpec{Template: deployment().Spec.Template}}
		var warnings []string
		c := &Cluster{Client: fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(ns, cj, job).Build(), Scope: sc,
			Warn: func(s string) { warnings = append(warnings, s) }}
		r, err := c.Explain(context.Background(), workload.Job, "ns", job.Name)
		if err != nil {
			t.Fatal(err)
		}
		if r.Skipped != skipped {
			t.Errorf("owner uid %s: skipped %v, want %v (%s %q)", uid, r.Skipped, skipped, r.Verdict, r.Reason)
		}
		if !skipped && len(warnings) == 0 {
			t.Errorf("owner uid %s: no warning that the CronJob is not its owner", uid)
		}
	}
}
