package watcher

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// decodeLikeClientGo is a Patch that answers as a real client does: the API server's
// answer is decoded (the apimachinery JSON serializer) into the object given, which keeps
// the map entries the answer lacks. Here the webhook keeps the stored stamp and strips
// the marker (stripMarker).
func decodeLikeClientGo(t *testing.T) func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
	return func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		answer := &appsv1.Deployment{}
		answer.Namespace, answer.Name = obj.GetNamespace(), obj.GetName()
		if err := stripMarker(ctx, c, answer, patch, opts...); err != nil {
			return err
		}
		answer.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
		data, err := json.Marshal(answer)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = serializer.NewCodecFactory(testScheme()).UniversalDeserializer().Decode(data, nil, obj)
		return err
	}
}

// TestNudgeAnswerOfATrimmedWorkload: a nudge of a workload as the cache keeps it
// (TrimWorkloads) judges the API server's answer as it would a cached one. Decoded into
// the trimmed object, the answer kept its padding beside the annotations it stands for,
// and the template's cache-only fingerprint: a template whose annotations take 140 kB
// counted twice, and a nudge the webhook did not stamp was reported too large to stamp
// (and left alone) instead of bypassed.
func TestNudgeAnswerOfATrimmedWorkload(t *testing.T) {
	ctx := context.Background()
	dep := staleDeployment()
	dep.Spec.Template.Annotations["example.com/notes"] = strings.Repeat("x", 140_000)
	c := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(optedInNamespace(), cfgMap("1"), dep.DeepCopy()).
		WithInterceptorFuncs(interceptor.Funcs{Patch: decodeLikeClientGo(t)}).Build()
	r, rec := newTestReconciler(t, c)
	live := &appsv1.Deployment{}
	if err := c.Get(ctx, appKey, live); err != nil {
		t.Fatal(err)
	}
	cached, err := TrimWorkloads(workload.Deployment, r.scope.Label, false)(live)
	if err != nil {
		t.Fatal(err)
	}
	obj := cached.(client.Object)
	tmpl := workload.Deployment.Template(obj)
	want, err := r.expected(ctx, obj, stamp.Consumed(obj.GetAnnotations(), &tmpl.Spec, r.sources))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = r.nudge(ctx, obj, want, staleStamp, "", false) // a bypass is retried: an error
	bypassed := false
	for len(rec.Events) > 0 {
		e := <-rec.Events
		if strings.Contains(e, ReasonStampTooLarge) {
			t.Errorf("event %q: the answer's annotations counted twice", e)
		}
		bypassed = bypassed || strings.Contains(e, ReasonStampBypassed)
	}
	if !bypassed {
		t.Error("a nudge the webhook did not stamp was not reported as bypassed")
	}
}
