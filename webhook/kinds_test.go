package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/internal/argo"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// review is an admission request for any object of kind k.
func review(t *testing.T, k *workload.Kind, op admissionv1.Operation, obj, old client.Object) admission.Request {
	t.Helper()
	raw := func(o client.Object) runtime.RawExtension {
		if o == nil {
			return runtime.RawExtension{}
		}
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "uid", Kind: metav1.GroupVersionKind{Group: k.Group, Version: k.Version, Kind: k.Kind},
		Operation: op, Namespace: "ns", Name: "app", Object: raw(obj), OldObject: raw(old),
	}}
}

func cmTemplate() corev1.PodTemplateSpec {
	return dep(nil, "img", "cfg").Spec.Template
}

// Every kind is stamped the same way, at the same paths.
func TestHandleEveryKind(t *testing.T) {
	want := expected(t, "1")
	meta := metav1.ObjectMeta{Namespace: "ns", Name: "app"}
	objs := map[*workload.Kind]client.Object{
		workload.Deployment:  &appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{Template: cmTemplate()}},
		workload.StatefulSet: &appsv1.StatefulSet{ObjectMeta: meta, Spec: appsv1.StatefulSetSpec{Template: cmTemplate()}},
		workload.DaemonSet:   &appsv1.DaemonSet{ObjectMeta: meta, Spec: appsv1.DaemonSetSpec{Template: cmTemplate()}},
		workload.Rollout:     &argo.Rollout{ObjectMeta: meta, Spec: argo.RolloutSpec{Template: cmTemplate()}},
		workload.CronJob: &batchv1.CronJob{ObjectMeta: meta, Spec: batchv1.CronJobSpec{Schedule: "0 0 1 1 *",
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: cmTemplate()}}}},
		workload.Job: &batchv1.Job{ObjectMeta: meta, Spec: batchv1.JobSpec{Template: cmTemplate()}},
	}
	all := append(workload.Builtin(), workload.Rollout)
	for k, obj := range objs {
		t.Run(k.Kind, func(t *testing.T) {
			s := stamper(t, cm("cfg", "1"))
			s.Kinds = all
			resp := s.Handle(context.Background(), review(t, k, admissionv1.Create, obj, nil))
			if !resp.Allowed || len(resp.Patches) != 3 || resp.Patches[0].Path != k.TemplatePath()+"/metadata/annotations" {
				t.Fatalf("want the stamp and the record, got %+v", resp)
			}
			if got := resp.Patches[0].Value.(map[string]string)[stamp.HashAnnotation]; got != want.Hash {
				t.Fatalf("hash %q, want %q", got, want.Hash)
			}
		})
	}
	// A kind not enabled passes untouched.
	resp := stamper(t, cm("cfg", "1")).Handle(context.Background(), review(t, workload.Rollout, admissionv1.Create, objs[workload.Rollout], nil))
	if !resp.Allowed || len(resp.Patches) != 0 {
		t.Fatalf("Rollouts not enabled: %+v", resp)
	}
	// A Rollout that runs a Deployment's template has none of its own: untouched.
	ref := &argo.Rollout{ObjectMeta: meta, Spec: argo.RolloutSpec{WorkloadRef: &argo.WorkloadRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "app"}}}
	s := stamper(t, cm("cfg", "1"))
	s.Kinds = all
	if resp := s.Handle(context.Background(), review(t, workload.Rollout, admissionv1.Create, ref, nil)); !resp.Allowed || len(resp.Patches) != 0 {
		t.Fatalf("workloadRef Rollout: %+v", resp)
	}
}

// A Job's template cannot change: an UPDATE is never mutated, not even a nudge's (its
// registration sends none; this is the handler's own guard). A Job copied from a
// CronJob carries the CronJob's stamp: its CREATE keeps it when the config is the same.
func TestHandleJobCreateOnly(t *testing.T) {
	meta := metav1.ObjectMeta{Namespace: "ns", Name: "app"}
	s := stamper(t, cm("cfg", "1"))
	cj := &batchv1.CronJob{ObjectMeta: meta, Spec: batchv1.CronJobSpec{Schedule: "0 0 1 1 *",
		JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: cmTemplate()}}}}
	resp := s.Handle(context.Background(), review(t, workload.CronJob, admissionv1.Create, cj, nil))
	if !resp.Allowed || len(resp.Patches) == 0 || resp.Patches[0].Path != workload.CronJob.TemplatePath()+"/metadata/annotations" {
		t.Fatalf("CronJob: %+v", resp)
	}
	copied := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app-manual", Annotations: map[string]string{"cronjob.kubernetes.io/instantiate": "manual"}},
		Spec: batchv1.JobSpec{Template: cmTemplate()}}
	copied.Spec.Template.Annotations = resp.Patches[0].Value.(map[string]string)
	resp = s.Handle(context.Background(), review(t, workload.Job, admissionv1.Create, copied, nil))
	if !resp.Allowed || len(resp.Patches) == 0 {
		t.Fatalf("a Job copied from a current CronJob is recorded, got %+v", resp)
	}
	for _, p := range resp.Patches {
		if !strings.HasPrefix(p.Path, "/metadata/annotations") {
			t.Fatalf("a Job copied from a current CronJob keeps its stamp (only its metadata is written), got %+v", resp)
		}
	}
	stored := copied.DeepCopy()
	stale := stored.DeepCopy()
	stale.Spec.Template.Annotations = nil
	stale.Annotations = map[string]string{stamp.NudgeAnnotation: stamp.NudgeFor(expected(t, "1").Key)}
	if resp := s.Handle(context.Background(), review(t, workload.Job, admissionv1.Update, stale, stored)); !resp.Allowed || len(resp.Patches) != 0 {
		t.Fatalf("a Job's UPDATE is never mutated, got %+v", resp)
	}
}

// extra-sources: valid entries count, malformed ones give a warning and never a
// rejection; changing the annotation restamps.
func TestHandleExtraSources(t *testing.T) {
	d := dep(nil, "img")
	d.Annotations = map[string]string{stamp.ExtraSourcesAnnotation: "configmap/cfg, bogus, secret/s"}
	s := stamper(t, cm("cfg", "1"))
	resp := s.Handle(context.Background(), request(t, admissionv1.Create, d, nil))
	if !resp.Allowed || len(resp.Patches) != 3 {
		t.Fatalf("want the stamp and the record, got %+v", resp)
	}
	if got := resp.Patches[0].Value.(map[string]string)[stamp.SourcesAnnotation]; !strings.HasPrefix(got, "configmap/cfg=") || strings.Contains(got, "secret") {
		t.Fatalf("sources %q", got)
	}
	if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], `"bogus"`) || !strings.Contains(resp.Warnings[0], "--secrets") {
		t.Fatalf("warnings %q", resp.Warnings)
	}

	// The stamp and record as stored; then the annotation drops the source.
	stored := d.DeepCopy()
	stored.Spec.Template.Annotations = resp.Patches[0].Value.(map[string]string)
	stored.Annotations[stamp.ObservedAnnotation] = resp.Patches[1].Value.(string) // added to the existing annotations
	changed := stored.DeepCopy()
	changed.Annotations[stamp.ExtraSourcesAnnotation] = ""
	resp = s.Handle(context.Background(), request(t, admissionv1.Update, changed, stored))
	if !resp.Allowed || len(resp.Patches) == 0 || resp.Patches[0].Operation != "remove" {
		t.Fatalf("dropping the only source removes the stamp, got %+v", resp)
	}
}

// With Secrets on, a Secret is read and digested with the key; without a key, the
// Deployment is admitted with its stored stamp and a warning.
func TestHandleSecrets(t *testing.T) {
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"}, Data: map[string][]byte{"password": []byte("hunter2")}}
	d := dep(nil, "img")
	d.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}}}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(sec).Build()

	hashWith := func(key []byte) string {
		s := &Stamper{Reader: reader, Key: func() []byte { return key }, Sources: stamp.Options{Secrets: true}}
		resp := s.Handle(context.Background(), request(t, admissionv1.Create, d, nil))
		if !resp.Allowed {
			t.Fatalf("rejected: %+v", resp)
		}
		if key == nil {
			if len(resp.Patches) != 0 || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "no hash key") {
				t.Fatalf("no key: want no patch and a warning, got %+v", resp)
			}
			return ""
		}
		got := resp.Patches[0].Value.(map[string]string)
		if !strings.HasPrefix(got[stamp.SourcesAnnotation], "secret/db=") {
			t.Fatalf("sources %q", got[stamp.SourcesAnnotation])
		}
		return got[stamp.HashAnnotation]
	}
	a, b := hashWith(bytes.Repeat([]byte{1}, 32)), hashWith(bytes.Repeat([]byte{2}, 32))
	if a == "" || a == b || a != hashWith(bytes.Repeat([]byte{1}, 32)) {
		t.Fatalf("key 1: %s, key 2: %s", a, b)
	}
	hashWith(nil)
	// Secrets off: the Secret does not count at all.
	resp := (&Stamper{Reader: reader, Key: testKey}).Handle(context.Background(), request(t, admissionv1.Create, d, nil))
	if !resp.Allowed || len(resp.Patches) != 0 {
		t.Fatalf("Secrets off: %+v", resp)
	}
}

// A Rollout whose template does not decode (Argo's CRD keeps volumes as they come) is
// admitted untouched, with a warning.
func TestHandleUndecodableRolloutTemplate(t *testing.T) {
	raw := []byte(`{"apiVersion":"argoproj.io/v1alpha1","kind":"Rollout","metadata":{"name":"app","namespace":"ns"},
	 "spec":{"template":{"spec":{"containers":[{"name":"c","image":"i"}],"volumes":[{"name":"v","configMap":{"name":"cfg","defaultMode":"0644"}}]}}}}`)
	req := review(t, workload.Rollout, admissionv1.Create, nil, nil)
	req.Object.Raw = raw
	s := stamper(t, cm("cfg", "1"))
	s.Kinds = append(workload.Builtin(), workload.Rollout)
	resp := s.Handle(context.Background(), req)
	if !resp.Allowed || len(resp.Patches) != 0 || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "does not decode") {
		t.Fatalf("want admitted untouched with a warning, got %+v", resp)
	}
}
