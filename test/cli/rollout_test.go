package cli

import (
	"encoding/json"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/explain"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

// TestRollout explains an Argo Rollout stamped by the webhook, and finds it with impact.
// Before it installs the Rollout CRD (only this test does, so the check does not depend
// on the order the tests run in), explain of a Rollout is an error that says so.
func TestRollout(t *testing.T) {
	f := fixtures(t)
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	if err := k8s.Get(bg, client.ObjectKey{Name: "rollouts.argoproj.io"}, crd); apierrors.IsNotFound(err) {
		want := "error: rollout/web: the kind is not installed in this cluster"
		if r := run(t, "", "explain", "-n", f.in, "rollout/web"); r.code == 0 || !strings.Contains(r.stderr, want) {
			t.Errorf("no Rollout CRD: exit %d, stderr %q; want non-zero and %q", r.code, r.stderr, want)
		}
	} else if err != nil {
		t.Fatal(err)
	} else {
		t.Log("the Rollout CRD is installed already (the test ran before in this cluster): its absence is not checked again")
	}
	if err := env.InstallCRDs(bg, framework.ArgoRolloutsCRD()); err != nil {
		t.Fatal(err)
	}
	env.Start(t, framework.Options{Args: append(serverArgs, "--argo-rollouts", "--exclude-namespaces", "kube-system,"+f.in+","+f.out)})
	ns := env.NewNamespace(t, true)
	if err := k8s.Create(bg, configMap(ns, "app", map[string]string{"a": "1"})); err != nil {
		t.Fatal(err)
	}
	ro := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
		"metadata": map[string]any{"namespace": ns, "name": "canary"},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"app": "canary"}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "canary"}},
				"spec": map[string]any{"containers": []any{map[string]any{
					"name": "c", "image": "registry.example/app:1",
					"envFrom": []any{map[string]any{"configMapRef": map[string]any{"name": "app"}}},
				}}},
			},
		},
	}}
	if err := k8s.Create(bg, ro); err != nil {
		t.Fatal(err)
	}
	hash, _, _ := unstructured.NestedString(ro.Object, "spec", "template", "metadata", "annotations", stamp.HashAnnotation)
	if hash == "" {
		t.Fatal("the webhook did not stamp the Rollout")
	}
	var r explain.Report
	if err := json.Unmarshal([]byte(ok(t, "explain", "-n", ns, "rollout/canary", "-o", "json")), &r); err != nil {
		t.Fatal(err)
	}
	if r.Kind != "rollout" || r.Verdict != explain.VerdictUpToDate || r.Stamp.Hash != hash || r.Current.Hash != hash {
		t.Errorf("explain rollout: %s %q stamp %s current %s, want up to date at %s", r.Verdict, r.Reason, r.Stamp.Hash, r.Current.Hash, hash)
	}
	if out := ok(t, "impact", "-n", ns, "configmap/app"); !strings.Contains(out, "rollout/canary") {
		t.Errorf("impact lacks rollout/canary:\n%s", out)
	}

	// A Rollout whose pod template is a Deployment's (spec.workloadRef): configstamp
	// stamps the Deployment, and the Rollout gets its verdict.
	base := deployment(ns, "base", envFrom("app"))
	if err := k8s.Create(bg, base); err != nil {
		t.Fatal(err)
	}
	ref := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
		"metadata": map[string]any{"namespace": ns, "name": "ref"},
		"spec": map[string]any{
			"selector":    map[string]any{"matchLabels": map[string]any{"app": "base"}},
			"workloadRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "base"},
		},
	}}
	if err := k8s.Create(bg, ref); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(ok(t, "explain", "-n", ns, "rollout/ref", "-o", "json")), &r); err != nil {
		t.Fatal(err)
	}
	baseHash := base.Spec.Template.Annotations[stamp.HashAnnotation]
	if r.Kind != "rollout" || r.Name != "ref" || r.TemplateOf != "deployment/base" || r.Verdict != explain.VerdictUpToDate || baseHash == "" || r.Stamp.Hash != baseHash {
		t.Errorf("explain rollout/ref: %s/%s of %q: %s %q, stamp %s; want deployment/base's up to date at %q", r.Kind, r.Name, r.TemplateOf, r.Verdict, r.Reason, r.Stamp.Hash, baseHash)
	}
}
