package kinds

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
)

// This package runs under the chart's policy restricting configstamp's own identity
// (TestMain installs it): every stamp, nudge and record of the other tests passes it.
// These tests show what it denies.

// asConfigstamp is a client acting as configstamp's user.
func asConfigstamp(t *testing.T) client.Client {
	t.Helper()
	c, err := env.ConfigstampClient()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// patchAs sends a patch as c (a JSON patch when it is a list, else a JSON merge patch)
// and checks the policy's answer.
func patchAs(t *testing.T, c client.Client, obj client.Object, patch string, allowed bool) {
	t.Helper()
	pt := types.MergePatchType
	if strings.HasPrefix(patch, "[") {
		pt = types.JSONPatchType
	}
	err := c.Patch(bg, obj, client.RawPatch(pt, []byte(patch)))
	switch {
	case allowed && err != nil:
		t.Errorf("%T %s: patch %s refused: %v", obj, obj.GetName(), patch, err)
	case !allowed && err == nil:
		t.Errorf("%T %s: patch %s went through, want it denied", obj, obj.GetName(), patch)
	case !allowed && !strings.Contains(err.Error(), "denied request"):
		t.Errorf("%T %s: patch %s: %v, want the policy's denial", obj, obj.GetName(), patch, err)
	}
}

// TestSelfPolicyWorkloads: as configstamp, a change of a workload's image, a
// container's command, a label, a user's annotation or a spec field outside the pod
// template is denied, on each kind; configstamp's own annotations go through.
func TestSelfPolicyWorkloads(t *testing.T) {
	t.Parallel()
	ns := env.NewNamespace(t, false) // not opted in: no webhook adds to the patches
	as := asConfigstamp(t)
	objs := []client.Object{newDeployment(ns, "deploy", "", nil), newStatefulSet(ns, "sts", ""), newDaemonSet(ns, "ds", "")}
	for _, obj := range objs {
		create(t, obj)
		patchAs(t, as, obj, `[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"registry.example/other:2"}]`, false)
		patchAs(t, as, obj, `[{"op":"add","path":"/spec/template/spec/containers/0/command","value":["/bin/sh"]}]`, false)
		patchAs(t, as, obj, `{"spec":{"template":{"metadata":{"labels":{"extra":"x"}}}}}`, false)
		patchAs(t, as, obj, `{"spec":{"template":{"metadata":{"annotations":{"someone.else/key":"x"}}}}}`, false)
		patchAs(t, as, obj, `{"metadata":{"labels":{"extra":"x"}}}`, false)
		patchAs(t, as, obj, `{"metadata":{"annotations":{"`+stamp.SkipAnnotation+`":"true"}}}`, false)
		patchAs(t, as, obj, `{"spec":{"minReadySeconds":7}}`, false)

		patchAs(t, as, obj, `{"metadata":{"annotations":{"`+stamp.NudgeAnnotation+`":"true"}}}`, true)
		patchAs(t, as, obj, `{"metadata":{"annotations":{"`+stamp.ObservedAnnotation+`":"x","`+stamp.ChangeCauseAnnotation+`":"configstamp: test"}}}`, true)
		patchAs(t, as, obj, `{"spec":{"template":{"metadata":{"annotations":{"`+stamp.HashAnnotation+`":"ab","`+stamp.SourcesAnnotation+`":"configmap/a=1","`+stamp.RestartedAnnotation+`":"now"}}}}}`, true)
		patchAs(t, as, obj, `{"spec":{"template":{"metadata":{"annotations":{"`+stamp.HashAnnotation+`":null}}}}}`, true)
	}
	if err := as.Delete(bg, objs[0]); err == nil || !strings.Contains(err.Error(), "denied request") {
		t.Errorf("delete of a Deployment as configstamp: %v, want the policy's denial", err)
	}
	// The admin is not configstamp: the policy leaves it alone.
	patchAs(t, env.Client, objs[0], `[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"registry.example/other:2"}]`, true)
}

// TestSelfPolicyRegistration: as configstamp, its registration's caBundle and
// configstamp.io/ annotations change; its rules, its URL, a label, another annotation,
// and its deletion are denied.
func TestSelfPolicyRegistration(t *testing.T) {
	t.Parallel()
	none := admissionregistrationv1.SideEffectClassNone
	reg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "configstamp", Annotations: map[string]string{"meta.helm.sh/release-name": "configstamp"}},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "deployments.configstamp.io", AdmissionReviewVersions: []string{"v1"}, SideEffects: &none,
			FailurePolicy: ptr.To(admissionregistrationv1.Ignore),
			ClientConfig:  admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/mutate")},
			// Matches no namespace: the registration only stands for the chart's.
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"configstamp.test/none": "x"}},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}}}},
		}},
	}
	create(t, reg)
	t.Cleanup(func() { _ = env.Client.Delete(bg, reg) })
	as := asConfigstamp(t)
	patchAs(t, as, reg, `[{"op":"add","path":"/webhooks/0/clientConfig/caBundle","value":"Zm9v"}]`, true)
	patchAs(t, as, reg, `{"metadata":{"annotations":{"`+stamp.CoverageAnnotation+`":"{}"}}}`, true)

	patchAs(t, as, reg, `[{"op":"replace","path":"/webhooks/0/rules/0/resources","value":["deployments","pods"]}]`, false)
	patchAs(t, as, reg, `[{"op":"replace","path":"/webhooks/0/clientConfig/url","value":"https://attacker.example/mutate"}]`, false)
	patchAs(t, as, reg, `[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Fail"}]`, false)
	patchAs(t, as, reg, `[{"op":"remove","path":"/webhooks/0/namespaceSelector/matchLabels"}]`, false)
	patchAs(t, as, reg, `[{"op":"add","path":"/metadata/labels","value":{"x":"y"}}]`, false)
	patchAs(t, as, reg, `[{"op":"replace","path":"/metadata/annotations/meta.helm.sh~1release-name","value":"other"}]`, false)
	patchAs(t, as, reg, `[{"op":"replace","path":"/webhooks/0/clientConfig/caBundle","value":"YmFy"}]`, true)
	if err := as.Delete(bg, reg); err == nil || !strings.Contains(err.Error(), "denied request") {
		t.Errorf("delete of the registration as configstamp: %v, want the policy's denial", err)
	}
}
