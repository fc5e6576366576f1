package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/certs"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

// TestReinvocationSeesInjectedVolumes registers a second mutating webhook, called after
// configstamp's, that adds a ConfigMap volume (as sidecar injectors do). With
// reinvocationPolicy IfNeeded the API server calls configstamp again, and the stamp
// covers the injected ConfigMap.
func TestReinvocationSeesInjectedVolumes(t *testing.T) {
	env.Start(t, framework.Options{})
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "own", map[string]string{"k": "v"}))
	create(t, configMap(ns, "injected", map[string]string{"sidecar.yaml": "on"}))

	dir := t.TempDir()
	ca, err := certs.WriteSelfSigned(dir, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(injectVolume)}
	go func() { _ = srv.ServeTLS(ln, filepath.Join(dir, certs.CertName), filepath.Join(dir, certs.KeyName)) }()
	t.Cleanup(func() { _ = srv.Close() })

	injector := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "zz-volume-injector"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "inject.volumes.example.com",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				URL: new(fmt.Sprintf("https://%s/inject", ln.Addr())), CABundle: ca},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
		}},
	}
	if err := k8s.Create(bg, injector); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), injector) })

	// The API server picks the new registration up shortly: retry with dry runs.
	want := docHash(t, ns, docSource{name: "own"}, docSource{name: "injected"})
	framework.Eventually(t, 30*time.Second, "stamp covering the injected volume", func() error {
		d := deployment("app", podWithVolumes("own"))
		d.Namespace = ns
		if err := k8s.Create(bg, d, client.DryRunAll); err != nil {
			return err
		}
		if len(d.Spec.Template.Spec.Volumes) != 2 {
			return fmt.Errorf("injector not called yet")
		}
		if got := hashOf(d); got != want {
			return fmt.Errorf("hash %q, want %q (sources %s)", got, want, d.Spec.Template.Annotations[stamp.SourcesAnnotation])
		}
		return nil
	})
}

// injectVolume is a minimal mutating webhook adding a volume from ConfigMap "injected".
func injectVolume(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "bad review", http.StatusBadRequest)
		return
	}
	op := jsonpatch.NewOperation("add", "/spec/template/spec/volumes/-", map[string]any{
		"name": "injected", "configMap": map[string]any{"name": "injected"}})
	patch, _ := json.Marshal([]jsonpatch.JsonPatchOperation{op})
	review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true, Patch: patch,
		PatchType: ptr.To(admissionv1.PatchTypeJSONPatch)}
	review.Request = nil
	_ = json.NewEncoder(w).Encode(review)
}
