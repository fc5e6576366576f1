package integration

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/configstamp/configstamp/certs"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

// The chart's policies restricting configstamp's own identity (files/selfpolicy.yaml):
// what they deny and what they let through, by a client acting as configstamp's user.
// test/kinds runs every kind's stamps, nudges and records under them, and
// CONFIGSTAMP_TEST_SELF_POLICY=1 any layer.

// withSelfPolicy installs the policies until the test ends.
func withSelfPolicy(t *testing.T) {
	t.Helper()
	remove, err := env.InstallSelfPolicy(bg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
}

// workloads are a Deployment, a StatefulSet and a DaemonSet of one container.
func workloads(ns string) []client.Object {
	labels := map[string]string{"app": "a"}
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
	sel := &metav1.LabelSelector{MatchLabels: labels}
	return []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deploy"}, Spec: appsv1.DeploymentSpec{Selector: sel, Template: tmpl}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sts"}, Spec: appsv1.StatefulSetSpec{Selector: sel, Template: tmpl, ServiceName: "sts"}},
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ds"}, Spec: appsv1.DaemonSetSpec{Selector: sel, Template: tmpl}},
	}
}

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
	withSelfPolicy(t)
	ns := env.NewNamespace(t, false) // not opted in: no webhook adds to the patches
	as := asConfigstamp(t)
	objs := workloads(ns)
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

// TestSelfPolicyCronJobs: as configstamp, a CronJob changes in its annotations and its
// pod template's configstamp annotations alone (its schedule, its jobTemplate's labels
// and spec, a container are denied, and its deletion); a Job, never written by
// configstamp (stamped at its CREATE's admission only), takes no write of configstamp's.
func TestSelfPolicyCronJobs(t *testing.T) {
	withSelfPolicy(t)
	ns := env.NewNamespace(t, false)
	as := asConfigstamp(t)
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
	cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cj"},
		Spec: batchv1.CronJobSpec{Schedule: "0 0 1 1 *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: tmpl}}}}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "job"}, Spec: batchv1.JobSpec{Template: tmpl}}
	create(t, cj)
	create(t, job)
	// InstallSelfPolicy waited for the workloads' policy only: the CronJobs' is its own.
	framework.Eventually(t, 30*time.Second, "the CronJobs' policy enforced", func() error {
		err := as.Patch(bg, cj.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"schedule":"* * * * *"}}`)), client.DryRunAll)
		if err == nil {
			return errors.New("a dry-run change of the schedule went through")
		}
		return nil
	})
	tp := "/spec/jobTemplate/spec/template"
	patchAs(t, as, cj, `[{"op":"replace","path":"`+tp+`/spec/containers/0/image","value":"registry.example/other:2"}]`, false)
	patchAs(t, as, cj, `{"spec":{"jobTemplate":{"spec":{"template":{"metadata":{"labels":{"extra":"x"}}}}}}}`, false)
	patchAs(t, as, cj, `{"spec":{"jobTemplate":{"spec":{"template":{"metadata":{"annotations":{"someone.else/key":"x"}}}}}}}`, false)
	patchAs(t, as, cj, `{"spec":{"jobTemplate":{"spec":{"backoffLimit":9}}}}`, false)
	patchAs(t, as, cj, `{"spec":{"jobTemplate":{"metadata":{"labels":{"extra":"x"}}}}}`, false)
	patchAs(t, as, cj, `{"spec":{"schedule":"* * * * *"}}`, false)
	patchAs(t, as, cj, `{"spec":{"suspend":true}}`, false)
	patchAs(t, as, cj, `{"metadata":{"labels":{"extra":"x"}}}`, false)
	patchAs(t, as, cj, `{"metadata":{"annotations":{"`+stamp.NudgeAnnotation+`":"true"}}}`, true)
	patchAs(t, as, cj, `{"metadata":{"annotations":{"`+stamp.ObservedAnnotation+`":"x","`+stamp.ChangeCauseAnnotation+`":"configstamp: test"}}}`, true)
	patchAs(t, as, cj, `{"spec":{"jobTemplate":{"spec":{"template":{"metadata":{"annotations":{"`+stamp.HashAnnotation+`":"ab","`+stamp.SourcesAnnotation+`":"configmap/a=1"}}}}}}}`, true)
	patchAs(t, as, cj, `{"spec":{"jobTemplate":{"spec":{"template":{"metadata":{"annotations":{"`+stamp.HashAnnotation+`":null}}}}}}}`, true)
	if err := as.Delete(bg, cj); err == nil || !strings.Contains(err.Error(), "denied request") {
		t.Errorf("delete of a CronJob as configstamp: %v, want the policy's denial", err)
	}
	patchAs(t, as, job, `{"metadata":{"annotations":{"`+stamp.NudgeAnnotation+`":"true"}}}`, false)
	patchAs(t, as, job, `{"metadata":{"annotations":{"`+stamp.ObservedAnnotation+`":"x"}}}`, false)
	// The admin is not configstamp.
	patchAs(t, env.Client, cj, `{"spec":{"schedule":"0 0 2 1 *"}}`, true)
}

// TestSelfPolicyRegistration: as configstamp, its registration's caBundle and
// configstamp.io/ annotations change; its rules, its URL, a label, another annotation,
// and its deletion are denied.
func TestSelfPolicyRegistration(t *testing.T) {
	withSelfPolicy(t)
	reg := selfRegistration(t, "deployments.configstamp.io")
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

// selfRegistration creates the registration the policy guards (the chart's name), with
// one entry of each name, until the test ends, and waits until the API server enforces
// the registration's policy (InstallSelfPolicy waited for the workloads' one only).
func selfRegistration(t *testing.T, names ...string) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	none := admissionregistrationv1.SideEffectClassNone
	reg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "configstamp", Annotations: map[string]string{"meta.helm.sh/release-name": "configstamp"}},
	}
	for _, name := range names {
		reg.Webhooks = append(reg.Webhooks, admissionregistrationv1.MutatingWebhook{
			Name: name, AdmissionReviewVersions: []string{"v1"}, SideEffects: &none,
			FailurePolicy: ptr.To(admissionregistrationv1.Ignore),
			ClientConfig:  admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/mutate")},
			// Matches no namespace: the registration only stands for the chart's.
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"configstamp.test/none": "x"}},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}}}},
		})
	}
	create(t, reg)
	t.Cleanup(func() { _ = env.Client.Delete(bg, reg) })
	as := asConfigstamp(t)
	framework.Eventually(t, 30*time.Second, "the registration's policy enforced", func() error {
		err := as.Patch(bg, reg.DeepCopy(), client.RawPatch(types.JSONPatchType,
			[]byte(`[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Fail"}]`)), client.DryRunAll)
		if err == nil {
			return errors.New("a dry-run change of failurePolicy went through")
		}
		return nil
	})
	return reg
}

// TestCABundlePatchUnderSelfPolicy: the self-signed mode's caBundle write (a JSON
// patch of the entries' caBundle and configstamp's record) goes through the policy as
// configstamp. Two replicas that disagree on the CA race: the second replica's write
// lands between the first's read and its patch; the first's patch fails on its guards,
// it reads again and keeps the second's CA (retired) beside its own.
func TestCABundlePatchUnderSelfPolicy(t *testing.T) {
	withSelfPolicy(t)
	selfRegistration(t, "deployments.configstamp.io", "statefulsets.configstamp.io")
	ns := env.NewNamespace(t, false)
	second := replica(t, asConfigstamp(t), ns, "second-tls")
	patches := 0
	first := replica(t, interceptor.NewClient(configstampWithWatch(t), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if patches++; patches == 1 {
				publish(t, second)
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	}), ns, "first-tls")
	publish(t, first)
	if patches != 2 {
		t.Errorf("the first replica patched %d times, want 2 (one refused by its guards, one after reading again)", patches)
	}
	var reg admissionregistrationv1.MutatingWebhookConfiguration
	if err := k8s.Get(bg, client.ObjectKey{Name: "configstamp"}, &reg); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"first-tls", "second-tls"} {
		var s corev1.Secret
		if err := k8s.Get(bg, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
			t.Fatal(err)
		}
		for _, w := range reg.Webhooks {
			if !bytes.Contains(w.ClientConfig.CABundle, bytes.TrimSpace(s.Data[certs.CAName])) {
				t.Errorf("entry %s does not trust %s's CA", w.Name, name)
			}
		}
	}
	if reg.Annotations[certs.CAsAnnotation] == "" || reg.Annotations["meta.helm.sh/release-name"] != "configstamp" {
		t.Errorf("annotations %v: want the record beside the chart's", reg.Annotations)
	}
}

// TestCABundlePatchKeepsFieldsItDoesNotKnow: the caBundle write leaves alone the
// registration's fields this build's types lack (an API server newer than configstamp),
// so the self policy lets it through and the fields stay. Simulated by a client whose
// reads drop the entries' matchConditions, as a build without that field would: a typed
// update would then remove them, which the policy denies.
func TestCABundlePatchKeepsFieldsItDoesNotKnow(t *testing.T) {
	withSelfPolicy(t)
	reg := selfRegistration(t, "deployments.configstamp.io")
	conditions := `[{"name":"not-a-dry-run","expression":"!request.dryRun"}]`
	if err := k8s.Patch(bg, reg, client.RawPatch(types.JSONPatchType, []byte(`[{"op":"add","path":"/webhooks/0/matchConditions","value":`+conditions+`}]`))); err != nil {
		t.Fatal(err)
	}
	older := interceptor.NewClient(configstampWithWatch(t), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			err := c.Get(ctx, key, obj, opts...)
			if mwc, ok := obj.(*admissionregistrationv1.MutatingWebhookConfiguration); ok {
				for i := range mwc.Webhooks {
					mwc.Webhooks[i].MatchConditions = nil
				}
			}
			return err
		},
	})
	r := replica(t, older, env.NewNamespace(t, false), "tls")
	publish(t, r)
	if err := k8s.Get(bg, client.ObjectKeyFromObject(reg), reg); err != nil {
		t.Fatal(err)
	}
	w := reg.Webhooks[0]
	if len(w.ClientConfig.CABundle) == 0 {
		t.Error("no caBundle written")
	}
	if len(w.MatchConditions) != 1 || w.MatchConditions[0].Name != "not-a-dry-run" {
		t.Errorf("matchConditions %v: the field the writer did not know was lost", w.MatchConditions)
	}
}

// replica is the self-signed mode of one configstamp replica keeping the registration
// the self policy guards, with its certificate in Secret ns/secret, acting through c.
func replica(t *testing.T, c client.Client, ns, secret string) *certs.Rotator {
	return &certs.Rotator{Publisher: certs.Publisher{Client: c, Registration: "configstamp"},
		Secret: types.NamespacedName{Namespace: ns, Name: secret}, Hosts: []string{"127.0.0.1"}, CertDir: t.TempDir(),
		Validity: 10 * time.Hour, RenewBefore: 3 * time.Hour, CAValidity: 30 * time.Hour}
}

// publish runs one pass of r: it writes the Secret and the registration's caBundle.
// Nothing is served yet and the CA is new to the registration, so the pass ends in
// ErrWaiting, after the publish.
func publish(t *testing.T, r *certs.Rotator) {
	t.Helper()
	if _, err := r.Ensure(bg); err != nil && !errors.Is(err, certs.ErrWaiting) {
		t.Fatal(err)
	}
}

// configstampWithWatch is a client acting as the configstamp user, that interceptors
// can wrap.
func configstampWithWatch(t *testing.T) client.WithWatch {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", env.Cluster.ConfigstampKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
