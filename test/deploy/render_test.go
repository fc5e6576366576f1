package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/webhook"
)

const releaseNS = "configstamp-system"

// render runs helm template and returns the objects by "Kind/name".
func render(t *testing.T, args ...string) map[string]*unstructured.Unstructured {
	t.Helper()
	return decodeAll(t, renderText(t, chart, args...))
}

// renderText runs helm template on the chart in dir and returns what it prints.
func renderText(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return tool(t, "helm", append([]string{"template", "configstamp", dir, "--namespace", releaseNS}, args...)...)
}

// decodeAll decodes a multi-document YAML stream into objects by "Kind/name".
func decodeAll(t *testing.T, out string) map[string]*unstructured.Unstructured {
	t.Helper()
	objs := map[string]*unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(out)), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("decode rendered chart: %v", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		objs[u.GetKind()+"/"+u.GetName()] = &u
	}
	return objs
}

func typed[T any](t *testing.T, objs map[string]*unstructured.Unstructured, key string) *T {
	t.Helper()
	u, ok := objs[key]
	if !ok {
		t.Fatalf("chart renders no %s", key)
	}
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &out); err != nil {
		t.Fatalf("convert %s: %v", key, err)
	}
	return &out
}

func TestRenderLints(t *testing.T) {
	tool(t, "helm", "lint", chart)
	tool(t, "helm", "lint", chart, "--set", "secrets.enabled=true", "--set", "argoRollouts.enabled=true", "--set", "certificates.mode=self-signed")
}

// workloadKind is one kind the registration sends admissions for, as the design names it.
type workloadKind struct {
	group, version, resource, path string
	// createOnly: CREATE is sent alone (Jobs: their template cannot change).
	createOnly bool
}

var (
	appsKinds = []workloadKind{
		{"apps", "v1", "deployments", "/mutate-apps-v1-deployment", false},
		{"apps", "v1", "statefulsets", "/mutate-apps-v1-statefulset", false},
		{"apps", "v1", "daemonsets", "/mutate-apps-v1-daemonset", false},
		{"batch", "v1", "cronjobs", "/mutate-batch-v1-cronjob", false},
		{"batch", "v1", "jobs", "/mutate-batch-v1-job", true},
	}
	rolloutKind = workloadKind{"argoproj.io", "v1alpha1", "rollouts", "/mutate-argoproj-io-v1alpha1-rollout", false}
)

// entryNames are the registration's entries for these kinds, in order: per kind, the
// namespace opt-in entry, then the workload opt-in entry. The API server prefixes the
// audit annotations with them, so they are part of the contract.
func entryNames(kinds []workloadKind) []string {
	var out []string
	for _, k := range kinds {
		out = append(out, k.resource+".configstamp.io", k.resource+".by-label.configstamp.io")
	}
	return out
}

func TestRenderRegistration(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		kinds []workloadKind
	}{
		{"default", nil, appsKinds},
		{"argoRollouts", []string{"--set", "argoRollouts.enabled=true"}, append(slices.Clone(appsKinds), rolloutKind)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.args...)
			mwc := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration/configstamp")
			var names []string
			for _, w := range mwc.Webhooks {
				names = append(names, w.Name)
			}
			if want := entryNames(tc.kinds); !slices.Equal(names, want) {
				t.Fatalf("entries %v, want %v", names, want)
			}
			for i, w := range mwc.Webhooks {
				k := tc.kinds[i/2]
				byLabel := i%2 == 1
				check := func(what string, ok bool) {
					t.Helper()
					if !ok {
						t.Errorf("entry %s: %s", w.Name, what)
					}
				}
				ops := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
				if k.createOnly {
					ops = ops[:1]
				}
				check(fmt.Sprintf("one rule: %s/%s %s %v only, namespaced", k.group, k.version, k.resource, ops), len(w.Rules) == 1 &&
					slices.Equal(w.Rules[0].APIGroups, []string{k.group}) && slices.Equal(w.Rules[0].APIVersions, []string{k.version}) &&
					slices.Equal(w.Rules[0].Resources, []string{k.resource}) &&
					slices.Equal(w.Rules[0].Operations, ops) &&
					w.Rules[0].Scope != nil && *w.Rules[0].Scope == admissionregistrationv1.NamespacedScope)
				check("sideEffects None", w.SideEffects != nil && *w.SideEffects == admissionregistrationv1.SideEffectClassNone)
				check("reinvocationPolicy IfNeeded", w.ReinvocationPolicy != nil && *w.ReinvocationPolicy == admissionregistrationv1.IfNeededReinvocationPolicy)
				check("matchPolicy Equivalent", w.MatchPolicy != nil && *w.MatchPolicy == admissionregistrationv1.Equivalent)
				check("failurePolicy Ignore by default", w.FailurePolicy != nil && *w.FailurePolicy == admissionregistrationv1.Ignore)
				check("timeoutSeconds 5 by default", w.TimeoutSeconds != nil && *w.TimeoutSeconds == 5)
				check("admissionReviewVersions [v1]", slices.Equal(w.AdmissionReviewVersions, []string{"v1"}))
				check("calls the Service on 443 at "+k.path, w.ClientConfig.Service != nil && w.ClientConfig.Service.Name == "configstamp" &&
					w.ClientConfig.Service.Namespace == releaseNS && w.ClientConfig.Service.Path != nil && *w.ClientConfig.Service.Path == k.path &&
					w.ClientConfig.Service.Port != nil && *w.ClientConfig.Service.Port == 443)
				check("objectSelector only on the workload opt-in entry", (w.ObjectSelector != nil) == byLabel)
			}
			checkOneScope(t, objs)
			checkOneScope(t, render(t, append(tc.args, "--set", "excludeNamespaces={kube-system,kube-public,"+releaseNS+"}", "--set", "namespaceLabel=example.com/stamp")...))
			checkSameAsConfigstamp(t, objs)
			checkSentOnce(t, objs, stamp.InjectLabel)
			check := func(what string, ok bool) {
				t.Helper()
				if !ok {
					t.Errorf("registration: %s", what)
				}
			}
			// configstamp keeps the caBundle in both modes: no CA injector is asked (it would
			// put the new CA alone there at a CA renewal), and the chart sets no caBundle (an
			// upgrade leaves the live one as it is).
			check("no annotation (no cert-manager.io/inject-ca-from)", len(mwc.Annotations) == 0)
			for _, w := range mwc.Webhooks {
				check("entry "+w.Name+" without caBundle", len(w.ClientConfig.CABundle) == 0)
			}
		})
	}

	// Values reach every entry and the process.
	objs := render(t, "--set", "webhook.failurePolicy=Fail", "--set", "webhook.timeoutSeconds=10", "--set", "namespaceLabel=example.com/stamp")
	mwc := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration/configstamp")
	for _, w := range mwc.Webhooks {
		if *w.FailurePolicy != admissionregistrationv1.Fail || *w.TimeoutSeconds != 10 {
			t.Errorf("entry %s: failurePolicy and timeoutSeconds not applied: %v %v", w.Name, *w.FailurePolicy, *w.TimeoutSeconds)
		}
	}
	checkSentOnce(t, objs, "example.com/stamp")
	dep := typed[appsv1.Deployment](t, objs, "Deployment/configstamp")
	if !slices.Contains(dep.Spec.Template.Spec.Containers[0].Args, "--namespace-label=example.com/stamp") {
		t.Errorf("namespaceLabel does not reach the process: %v", dep.Spec.Template.Spec.Containers[0].Args)
	}
}

// processFlags returns the rendered configstamp container's --flag=value arguments.
func processFlags(t *testing.T, objs map[string]*unstructured.Unstructured) map[string]string {
	t.Helper()
	dep := typed[appsv1.Deployment](t, objs, "Deployment/configstamp")
	flags := map[string]string{}
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		if k, v, ok := strings.Cut(a, "="); ok {
			flags[k] = v
		}
	}
	return flags
}

// checkOneScope compares the rendered registration's selectors with the scope configstamp
// derives from the --namespace-label and --exclude-namespaces it is given: the namespace
// opt-in entries select exactly its namespaces; the workload opt-in entries select
// workloads carrying its label in the namespaces it does not exclude and that are not
// opted in already.
func checkOneScope(t *testing.T, objs map[string]*unstructured.Unstructured) {
	t.Helper()
	mwc := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration/configstamp")
	flags := processFlags(t, objs)
	sc, err := scope.New(flags["--namespace-label"], strings.Split(flags["--exclude-namespaces"], ","))
	if err != nil {
		t.Fatal(err)
	}
	byLabelNS := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: sc.Label, Operator: metav1.LabelSelectorOpNotIn, Values: []string{stamp.InjectValue}},
		{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: sc.Excluded},
	}}
	byLabelObj := &metav1.LabelSelector{MatchLabels: map[string]string{sc.Label: stamp.InjectValue}}
	for _, w := range mwc.Webhooks {
		if strings.Contains(w.Name, ".by-label.") {
			if !equality.Semantic.DeepEqual(w.NamespaceSelector, byLabelNS) || !equality.Semantic.DeepEqual(w.ObjectSelector, byLabelObj) {
				t.Errorf("entry %s: namespaceSelector %+v objectSelector %+v, want %+v %+v", w.Name, w.NamespaceSelector, w.ObjectSelector, byLabelNS, byLabelObj)
			}
			continue
		}
		if got, want := w.NamespaceSelector, sc.NamespaceSelector(); !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("entry %s: selector %+v, but configstamp acts on %+v", w.Name, got, want)
		}
	}
}

// checkSameAsConfigstamp compares the rendered registration's entries with those
// configstamp registers itself (--dev-webhook-url) for the flags the chart passes it:
// the same kinds, names, paths, rules, selectors and policies, in the same order.
func checkSameAsConfigstamp(t *testing.T, objs map[string]*unstructured.Unstructured) {
	t.Helper()
	mwc := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration/configstamp")
	flags := processFlags(t, objs)
	sc, err := scope.New(flags["--namespace-label"], strings.Split(flags["--exclude-namespaces"], ","))
	if err != nil {
		t.Fatal(err)
	}
	kinds := workload.Builtin()
	if flags["--argo-rollouts"] == "true" {
		kinds = append(kinds, workload.Rollout)
	}
	svc := admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
		Namespace: releaseNS, Name: "configstamp", Port: new(int32(443))}}
	want := webhook.Registration(svc, sc, kinds)
	if len(want.Webhooks) != len(mwc.Webhooks) {
		t.Fatalf("chart registers %d entries, configstamp %d", len(mwc.Webhooks), len(want.Webhooks))
	}
	for i := range want.Webhooks {
		if got, w := mwc.Webhooks[i], want.Webhooks[i]; !equality.Semantic.DeepEqual(got, w) {
			t.Errorf("entry %d: chart renders\n%+v\nconfigstamp registers\n%+v", i, got, w)
		}
	}
}

// checkSentOnce evaluates the registration's selectors as the API server does (a
// namespace carries kubernetes.io/metadata.name): per kind, a workload opted in either
// way, or both, matches exactly one entry; one not opted in, or in an excluded
// namespace, matches none.
func checkSentOnce(t *testing.T, objs map[string]*unstructured.Unstructured, label string) {
	t.Helper()
	mwc := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration/configstamp")
	matches := func(sel *metav1.LabelSelector, set map[string]string) bool {
		if sel == nil {
			return true
		}
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			t.Fatalf("selector %+v: %v", sel, err)
		}
		return s.Matches(labels.Set(set))
	}
	on := map[string]string{label: stamp.InjectValue}
	off := map[string]string{label: "disabled"}
	for _, tc := range []struct {
		ns            string
		nsLabels, obj map[string]string
		want          int
	}{
		{"team", on, nil, 1},
		{"team", on, on, 1},
		{"team", on, off, 1},
		{"team", nil, on, 1},
		{"team", off, on, 1},
		{"team", nil, nil, 0},
		{"team", nil, off, 0},
		{"kube-system", on, on, 0},
		{"kube-system", nil, on, 0},
		{releaseNS, on, on, 0},
		{releaseNS, nil, on, 0},
	} {
		nsSet := map[string]string{corev1.LabelMetadataName: tc.ns}
		for k, v := range tc.nsLabels {
			nsSet[k] = v
		}
		perResource := map[string][]string{}
		for _, w := range mwc.Webhooks {
			res := w.Rules[0].Resources[0]
			if _, ok := perResource[res]; !ok {
				perResource[res] = nil
			}
			if matches(w.NamespaceSelector, nsSet) && matches(w.ObjectSelector, tc.obj) {
				perResource[res] = append(perResource[res], w.Name)
			}
		}
		for _, res := range slices.Sorted(maps.Keys(perResource)) {
			if got := perResource[res]; len(got) != tc.want {
				t.Errorf("namespace %s labels %v, workload labels %v: %s sent to %v, want %d entries", tc.ns, tc.nsLabels, tc.obj, res, got, tc.want)
			}
		}
	}
}

// TestRenderFeatureFlags: secrets.enabled and argoRollouts.enabled reach the process.
func TestRenderFeatureFlags(t *testing.T) {
	flags := processFlags(t, render(t))
	if flags["--secrets"] != "false" || flags["--argo-rollouts"] != "false" {
		t.Errorf("defaults: --secrets=%q --argo-rollouts=%q, want false and false", flags["--secrets"], flags["--argo-rollouts"])
	}
	flags = processFlags(t, render(t, "--set", "secrets.enabled=true", "--set", "argoRollouts.enabled=true"))
	if flags["--secrets"] != "true" || flags["--argo-rollouts"] != "true" {
		t.Errorf("enabled: --secrets=%q --argo-rollouts=%q, want true and true", flags["--secrets"], flags["--argo-rollouts"])
	}

	for _, v := range []string{"secrets.enabled=yes", "argoRollouts.enabled=1"} {
		if out, err := toolErr("helm", "template", "configstamp", chart, "--namespace", releaseNS, "--set-string", v); err == nil {
			t.Errorf("%s accepted:\n%s", v, out)
		}
	}
}

// TestRenderCSISecrets: csiSecrets.enabled reaches both roles' processes and grants the
// CSI driver's kinds (read and watch for the watcher; get, and list of the pod
// statuses, for the webhook) only then.
func TestRenderCSISecrets(t *testing.T) {
	csiRules := func(objs map[string]*unstructured.Unstructured, key string) []string {
		var out []string
		for _, r := range typed[rbacv1.ClusterRole](t, objs, key).Rules {
			if slices.Contains(r.APIGroups, "secrets-store.csi.x-k8s.io") {
				out = append(out, fmt.Sprint(r.Resources, r.Verbs))
			}
		}
		return out
	}
	off := render(t)
	if f := processFlags(t, off); f["--csi-secrets"] != "false" {
		t.Errorf("default: --csi-secrets=%q, want false", f["--csi-secrets"])
	}
	for _, key := range []string{"ClusterRole/configstamp", "ClusterRole/configstamp-webhook"} {
		if got := csiRules(off, key); len(got) != 0 {
			t.Errorf("default: %s grants %v of the CSI driver's", key, got)
		}
	}
	on := render(t, "--set", "csiSecrets.enabled=true")
	if f, w := processFlags(t, on), flagsOf(t, on, "Deployment/configstamp-watcher"); f["--csi-secrets"] != "true" || w["--csi-secrets"] != "true" {
		t.Errorf("enabled: --csi-secrets=%q (webhook), %q (watcher), want true", f["--csi-secrets"], w["--csi-secrets"])
	}
	if got, want := csiRules(on, "ClusterRole/configstamp"), []string{"[secretproviderclasses secretproviderclasspodstatuses] [get list watch]"}; !slices.Equal(got, want) {
		t.Errorf("enabled: the watcher's ClusterRole grants %v, want %v", got, want)
	}
	if got, want := csiRules(on, "ClusterRole/configstamp-webhook"), []string{"[secretproviderclasses] [get]", "[secretproviderclasspodstatuses] [get list]"}; !slices.Equal(got, want) {
		t.Errorf("enabled: the webhook's ClusterRole grants %v, want %v", got, want)
	}
}

func TestRenderReadTimeoutFollowsWebhookTimeout(t *testing.T) {
	for seconds, want := range map[string]string{"5": "--read-timeout=3000ms", "10": "--read-timeout=6000ms", "1": "--read-timeout=600ms"} {
		dep := typed[appsv1.Deployment](t, render(t, "--set", "webhook.timeoutSeconds="+seconds), "Deployment/configstamp")
		if !slices.Contains(dep.Spec.Template.Spec.Containers[0].Args, want) {
			t.Errorf("timeoutSeconds %s: args %v, want %s", seconds, dep.Spec.Template.Spec.Containers[0].Args, want)
		}
	}
	if out, err := toolErr("helm", "template", "configstamp", chart, "--namespace", releaseNS, "--set", "webhook.timeoutSeconds=31"); err == nil {
		t.Errorf("timeoutSeconds 31 accepted:\n%s", out)
	}
}

// TestRenderRBACLeastPrivilege compares every permission the chart grants, as
// (group/resource, verb, name) triples, with exactly what configstamp needs in each
// combination of certificate mode, Secrets, Argo Rollouts and authenticated metrics.
func TestRenderRBACLeastPrivilege(t *testing.T) {
	for _, mode := range []string{"cert-manager", "self-signed"} {
		for _, secrets := range []bool{false, true} {
			for _, rollouts := range []bool{false, true} {
				for _, secure := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/secrets=%v/argoRollouts=%v/metrics.secure=%v", mode, secrets, rollouts, secure), func(t *testing.T) {
						checkRBAC(t, mode, secrets, rollouts, secure)
					})
				}
			}
		}
	}
	// The Lease granted by name is the one configstamp elects with, --leader-election-id
	// in extraArgs included (the last one, either form Go's flag package takes).
	for _, tc := range []struct {
		extraArgs, lease string
	}{
		{`["--concurrency=8"]`, "configstamp-watcher"},
		{`["--leader-election-id=one"]`, "one"},
		{`["-leader-election-id", "two", "--concurrency=8"]`, "two"},
		{`["--leader-election-id=one", "--leader-election-id", "three"]`, "three"},
	} {
		role := typed[rbacv1.Role](t, render(t, "--set-json", "extraArgs="+tc.extraArgs), "Role/configstamp")
		var names []string
		for _, r := range role.Rules {
			if slices.Contains(r.Resources, "leases") && len(r.ResourceNames) > 0 {
				names = append(names, r.ResourceNames...)
			}
		}
		if !slices.Equal(names, []string{tc.lease}) {
			t.Errorf("extraArgs %s: the Role grants the Leases %v, want %s", tc.extraArgs, names, tc.lease)
		}
	}
	// watcher.extraArgs come after extraArgs, so they name the Lease last.
	role := typed[rbacv1.Role](t, render(t, "--set-json", `extraArgs=["--leader-election-id=one"]`, "--set-json", `watcher.extraArgs=["--leader-election-id","four"]`), "Role/configstamp")
	if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Equal(r.ResourceNames, []string{"four"}) }) {
		t.Errorf("watcher.extraArgs --leader-election-id four: the Role grants %+v", role.Rules)
	}
}

// TestRenderWatcherExtraArgs: watcher.extraArgs reach the watcher's process only (with
// roles.split false, the one Deployment's, which runs the watcher), after extraArgs,
// which reach both roles.
func TestRenderWatcherExtraArgs(t *testing.T) {
	set := []string{"--set-json", `extraArgs=["--kube-api-qps=40"]`, "--set-json", `watcher.extraArgs=["--concurrency=8","--leader-elect=false"]`, "--set", "watcher.replicas=1"}
	objs := render(t, set...)
	hook, watcher := processFlags(t, objs), flagsOf(t, objs, "Deployment/configstamp-watcher")
	if hook["--kube-api-qps"] != "40" || watcher["--kube-api-qps"] != "40" {
		t.Errorf("extraArgs: webhook %q, watcher %q, want 40 in both", hook["--kube-api-qps"], watcher["--kube-api-qps"])
	}
	if watcher["--concurrency"] != "8" || watcher["--leader-elect"] != "false" || hook["--concurrency"] == "8" || hook["--leader-elect"] != "" {
		t.Errorf("watcher.extraArgs: watcher %v, webhook %v", watcher, hook)
	}
	if single := processFlags(t, render(t, append(set, "--set", "roles.split=false")...)); single["--concurrency"] != "8" || single["--kube-api-qps"] != "40" {
		t.Errorf("roles.split=false: %v, want both lists", single)
	}
}

// checkRBAC renders the chart with these options and compares its roles with what
// configstamp needs.
func checkRBAC(t *testing.T, mode string, secrets, rollouts, secure bool) {
	t.Helper()
	objs := render(t, "--set", "certificates.mode="+mode,
		"--set", fmt.Sprintf("secrets.enabled=%v", secrets), "--set", fmt.Sprintf("argoRollouts.enabled=%v", rollouts),
		"--set", fmt.Sprintf("metrics.secure=%v", secure))
	cr := typed[rbacv1.ClusterRole](t, objs, "ClusterRole/configstamp")
	role := typed[rbacv1.Role](t, objs, "Role/configstamp")
	clusterWide := grants{}
	clusterWide.add("/configmaps", "", "get", "list", "watch")
	for _, res := range []string{"deployments", "statefulsets", "daemonsets"} {
		clusterWide.add("apps/"+res, "", "get", "list", "watch", "patch")
	}
	// CronJobs are nudged; Jobs are stamped at CREATE only, never read.
	clusterWide.add("batch/cronjobs", "", "get", "list", "watch", "patch")
	clusterWide.add("apps/replicasets", "", "list")
	clusterWide.add("apps/controllerrevisions", "", "list")
	clusterWide.add("/namespaces", "", "get", "list", "watch")
	clusterWide.add("authentication.k8s.io/selfsubjectreviews", "", "create")
	// The start-up check of its own permissions.
	clusterWide.add("authorization.k8s.io/selfsubjectaccessreviews", "", "create")
	clusterWide.add("events.k8s.io/events", "", "create", "patch")
	clusterWide.add("/events", "", "create", "patch")
	// The watcher (roles.split, the default) reads the registration live and patches its
	// covered-since annotation; the caBundle and the certificate Secret are the webhook's
	// (checkWebhookRBAC).
	clusterWide.add("admissionregistration.k8s.io/mutatingwebhookconfigurations", "configstamp", "get", "patch")
	namespaced := grants{}
	// Leader election: its own Lease by name (create cannot be limited by name).
	namespaced.add("coordination.k8s.io/leases", "", "create")
	namespaced.add("coordination.k8s.io/leases", "configstamp-watcher", "get", "update")
	// The hash key: by name, get and update only (the chart creates the Secret).
	namespaced.add("/secrets", "configstamp-hash-key", "get", "update")
	if secrets {
		clusterWide.add("/secrets", "", "get", "list", "watch")
	}
	if rollouts {
		clusterWide.add("argoproj.io/rollouts", "", "get", "list", "watch", "patch")
	}
	if secure {
		clusterWide.add("authentication.k8s.io/tokenreviews", "", "create")
		clusterWide.add("authorization.k8s.io/subjectaccessreviews", "", "create")
	}
	checkGrants(t, "ClusterRole", cr.Rules, clusterWide)
	checkGrants(t, "Role", role.Rules, namespaced)
	if role.Namespace != releaseNS {
		t.Errorf("Role in %s, want %s", role.Namespace, releaseNS)
	}
	for key, u := range objs {
		if u.GetKind() != "ClusterRole" && u.GetKind() != "Role" {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(u.Object, "rules")
		for _, r := range rules {
			if s := strings.Join(flatten(r), " "); strings.Contains(s, "*") {
				t.Errorf("%s has a wildcard: %v", key, r)
			}
		}
	}
	// metrics.secure: a role for scrapers to be bound to, reading /metrics and
	// nothing else, bound to no one by the chart.
	if _, ok := objs["ClusterRole/configstamp-metrics-reader"]; ok != secure {
		t.Fatalf("ClusterRole configstamp-metrics-reader rendered %v, want %v", !secure, secure)
	}
	if secure {
		want := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}
		if got := typed[rbacv1.ClusterRole](t, objs, "ClusterRole/configstamp-metrics-reader").Rules; !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("configstamp-metrics-reader rules %+v, want %+v", got, want)
		}
	}
	checkWebhookRBAC(t, objs, mode, secrets, secure)
	// roles.split=false: the one ServiceAccount holds both roles' grants, the webhook's
	// certificate Secret and the caBundle's watch too.
	single := render(t, "--set", "certificates.mode="+mode, "--set", fmt.Sprintf("secrets.enabled=%v", secrets),
		"--set", fmt.Sprintf("argoRollouts.enabled=%v", rollouts), "--set", fmt.Sprintf("metrics.secure=%v", secure), "--set", "roles.split=false")
	clusterWide.add("admissionregistration.k8s.io/mutatingwebhookconfigurations", "configstamp", "list", "watch")
	if mode == "self-signed" {
		namespaced.add("/secrets", "configstamp-webhook-tls", "get", "update")
	} else {
		// --tls-secret: read and watched by name, never written.
		namespaced.add("/secrets", "configstamp-cert-manager-tls", "get", "list", "watch")
	}
	checkGrants(t, "ClusterRole (roles.split=false)", typed[rbacv1.ClusterRole](t, single, "ClusterRole/configstamp").Rules, clusterWide)
	checkGrants(t, "Role (roles.split=false)", typed[rbacv1.Role](t, single, "Role/configstamp").Rules, namespaced)
	for key, u := range objs {
		if strings.HasSuffix(u.GetKind(), "Binding") && u.GetName() != "configstamp" && u.GetName() != "configstamp-webhook" {
			t.Errorf("%s: the chart binds nothing but configstamp's own roles", key)
		}
	}
}

// checkWebhookRBAC: the webhook role's ServiceAccount (configstamp-webhook, the split
// Deployment configstamp's) is granted what neededByWebhook and its certificate mode list,
// nothing of the watcher's (no workload, no list or watch of sources, no Lease), and each
// binding of either ServiceAccount binds its own role to it alone.
func checkWebhookRBAC(t *testing.T, objs map[string]*unstructured.Unstructured, mode string, secrets, secure bool) {
	t.Helper()
	clusterWide := grants{}
	clusterWide.add("/configmaps", "", "get")
	if secrets {
		clusterWide.add("/secrets", "", "get")
	}
	// A Job's CronJob, whose extra-sources and skip its Jobs take.
	clusterWide.add("batch/cronjobs", "", "get")
	clusterWide.add("/namespaces", "", "list", "watch")
	clusterWide.add("authentication.k8s.io/selfsubjectreviews", "", "create")
	clusterWide.add("authorization.k8s.io/selfsubjectaccessreviews", "", "create")
	clusterWide.add("admissionregistration.k8s.io/mutatingwebhookconfigurations", "configstamp", "get", "patch", "list", "watch")
	if secure {
		clusterWide.add("authentication.k8s.io/tokenreviews", "", "create")
		clusterWide.add("authorization.k8s.io/subjectaccessreviews", "", "create")
	}
	namespaced := grants{}
	if mode == "self-signed" {
		namespaced.add("/secrets", "configstamp-webhook-tls", "get", "update")
	} else {
		namespaced.add("/secrets", "configstamp-cert-manager-tls", "get", "list", "watch")
	}
	namespaced.add("/secrets", "configstamp-hash-key", "get", "update")
	checkGrants(t, "ClusterRole configstamp-webhook", typed[rbacv1.ClusterRole](t, objs, "ClusterRole/configstamp-webhook").Rules, clusterWide)
	checkGrants(t, "Role configstamp-webhook", typed[rbacv1.Role](t, objs, "Role/configstamp-webhook").Rules, namespaced)
	dep := typed[appsv1.Deployment](t, objs, "Deployment/configstamp")
	if sa := dep.Spec.Template.Spec.ServiceAccountName; sa != "configstamp-webhook" {
		t.Errorf("the webhook's pods run as %q, want configstamp-webhook", sa)
	}
	if sa := typed[appsv1.Deployment](t, objs, "Deployment/configstamp-watcher").Spec.Template.Spec.ServiceAccountName; sa != "configstamp" {
		t.Errorf("the watcher's pods run as %q, want configstamp", sa)
	}
	if flags := processFlags(t, objs); flags["--watcher-user"] != "system:serviceaccount:"+releaseNS+":configstamp" {
		t.Errorf("the webhook's --watcher-user=%q, want the watcher's ServiceAccount", flags["--watcher-user"])
	}
	for key, u := range objs {
		if !strings.HasSuffix(u.GetKind(), "Binding") {
			continue
		}
		var subjects []rbacv1.Subject
		var ref rbacv1.RoleRef
		if u.GetKind() == "RoleBinding" {
			b := typed[rbacv1.RoleBinding](t, objs, key)
			subjects, ref = b.Subjects, b.RoleRef
		} else {
			b := typed[rbacv1.ClusterRoleBinding](t, objs, key)
			subjects, ref = b.Subjects, b.RoleRef
		}
		want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: u.GetName(), Namespace: releaseNS}}
		if ref.Name != u.GetName() || !equality.Semantic.DeepEqual(subjects, want) {
			t.Errorf("%s binds %s to %+v, want its own role to ServiceAccount %s alone", key, ref.Name, subjects, u.GetName())
		}
	}
}

// grants is a set of "group/resource verb name" (name empty: every name).
type grants map[string]bool

func (g grants) add(resource, name string, verbs ...string) {
	for _, v := range verbs {
		g[resource+" "+v+" "+name] = true
	}
}

// checkGrants compares what rules grant with want, both ways.
func checkGrants(t *testing.T, kind string, rules []rbacv1.PolicyRule, want grants) {
	t.Helper()
	got := grants{}
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 {
			t.Errorf("%s grants non-resource URLs %v", kind, r.NonResourceURLs)
		}
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, n := range names {
					got.add(g+"/"+res, n, r.Verbs...)
				}
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if !want[k] {
			t.Errorf("%s grants %s", kind, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if !got[k] {
			t.Errorf("%s lacks %s", kind, k)
		}
	}
}

func flatten(v any) []string {
	switch x := v.(type) {
	case map[string]any:
		var out []string
		for _, e := range x {
			out = append(out, flatten(e)...)
		}
		return out
	case []any:
		var out []string
		for _, e := range x {
			out = append(out, flatten(e)...)
		}
		return out
	case string:
		return []string{x}
	}
	return nil
}

// TestRenderMemoryLimit: the container has a memory limit, and configstamp is told it
// (CONFIGSTAMP_MEMORY_LIMIT, from which it sets the Go memory limit).
func TestRenderMemoryLimit(t *testing.T) {
	for _, args := range [][]string{nil, {"--set", "resources.limits.memory=1Gi"}} {
		c := typed[appsv1.Deployment](t, render(t, args...), "Deployment/configstamp").Spec.Template.Spec.Containers[0]
		if c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%v: no memory limit", args)
		}
		i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "CONFIGSTAMP_MEMORY_LIMIT" })
		if i < 0 || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.ResourceFieldRef == nil || c.Env[i].ValueFrom.ResourceFieldRef.Resource != "limits.memory" {
			t.Errorf("%v: env %+v, want CONFIGSTAMP_MEMORY_LIMIT from limits.memory", args, c.Env)
		}
		if slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "GOMEMLIMIT" }) {
			t.Errorf("%v: GOMEMLIMIT set: it would be the whole limit, leaving no room", args)
		}
	}
}

func TestRenderPodSecurityAndAvailability(t *testing.T) {
	objs := render(t)
	dep := typed[appsv1.Deployment](t, objs, "Deployment/configstamp")
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	check := func(what string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("deployment: %s", what)
		}
	}
	check("2 replicas", dep.Spec.Replicas != nil && *dep.Spec.Replicas == 2)
	check("the webhook role, without leader election", slices.Contains(c.Args, "--role=webhook") && !slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--leader-elect") }))
	// roles.split (the default): the watcher apart, leader-elected, its pods outside the
	// webhook's selector and Service, under the same pod security.
	watcher := typed[appsv1.Deployment](t, objs, "Deployment/configstamp-watcher")
	wc := watcher.Spec.Template.Spec.Containers[0]
	check("the watcher: 2 replicas, --role=watcher, leader election on, no webhook port", watcher.Spec.Replicas != nil && *watcher.Spec.Replicas == 2 &&
		slices.Contains(wc.Args, "--role=watcher") && slices.Contains(wc.Args, "--leader-elect=true") &&
		!slices.ContainsFunc(wc.Ports, func(p corev1.ContainerPort) bool { return p.Name == "webhook" }))
	check("the watcher's pods outside the webhook's selector", !labels.SelectorFromSet(dep.Spec.Selector.MatchLabels).Matches(labels.Set(watcher.Spec.Template.Labels)))
	// The Service selects the webhook's pods alone: they serve admission, and the
	// command-line tools read the server's settings from the Deployment it selects.
	svc := typed[corev1.Service](t, objs, "Service/configstamp").Spec.Selector
	check("the Service selects the webhook's pods, not the watcher's", labels.SelectorFromSet(svc).Matches(labels.Set(dep.Spec.Template.Labels)) &&
		!labels.SelectorFromSet(svc).Matches(labels.Set(watcher.Spec.Template.Labels)))
	check("the watcher's pod security as the webhook's", equality.Semantic.DeepEqual(watcher.Spec.Template.Spec.SecurityContext, pod.SecurityContext) &&
		equality.Semantic.DeepEqual(wc.SecurityContext, c.SecurityContext))
	if wpdb := typed[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget/configstamp-watcher"); wpdb.Spec.MinAvailable == nil || wpdb.Spec.MinAvailable.IntValue() != 1 ||
		!labels.SelectorFromSet(wpdb.Spec.Selector.MatchLabels).Matches(labels.Set(watcher.Spec.Template.Labels)) {
		t.Errorf("watcher PDB %+v", wpdb.Spec)
	}
	if single := typed[appsv1.Deployment](t, render(t, "--set", "roles.split=false"), "Deployment/configstamp"); !slices.Contains(single.Spec.Template.Spec.Containers[0].Args, "--leader-elect=true") {
		t.Error("roles.split=false: leader election off")
	}
	check("runs as non-root 65532", pod.SecurityContext != nil && pod.SecurityContext.RunAsNonRoot != nil && *pod.SecurityContext.RunAsNonRoot &&
		pod.SecurityContext.RunAsUser != nil && *pod.SecurityContext.RunAsUser == 65532)
	check("seccomp RuntimeDefault", pod.SecurityContext.SeccompProfile != nil && pod.SecurityContext.SeccompProfile.Type == "RuntimeDefault")
	sc := c.SecurityContext
	check("read-only root filesystem", sc != nil && sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem)
	check("all capabilities dropped", sc != nil && sc.Capabilities != nil && slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}))
	check("no privilege escalation", sc != nil && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation)
	check("readiness and liveness probes", c.ReadinessProbe != nil && c.LivenessProbe != nil &&
		c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Path == "/readyz")
	check("a startup probe allowing minutes for the first certificate", c.StartupProbe != nil && c.StartupProbe.HTTPGet != nil &&
		c.StartupProbe.HTTPGet.Path == "/healthz" && c.StartupProbe.PeriodSeconds*c.StartupProbe.FailureThreshold >= 300)
	check("anti-affinity across nodes", pod.Affinity != nil && pod.Affinity.PodAntiAffinity != nil &&
		len(pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 1)
	checkCertDir(t, "cert-manager", dep)
	pdb := typed[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget/configstamp")
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PDB minAvailable %v, want 1", pdb.Spec.MinAvailable)
	}
	if _, ok := objs["NetworkPolicy/configstamp"]; !ok {
		t.Error("no NetworkPolicy by default (what it allows: TestRenderNetworkPolicy)")
	}
	// A budget that no eviction could meet would block every node drain.
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"--set", "replicas=1"}, false},
		{[]string{"--set", "replicas=2", "--set", "podDisruptionBudget.minAvailable=2"}, false},
		{[]string{"--set", "replicas=3", "--set", "podDisruptionBudget.minAvailable=2"}, true},
	} {
		if _, got := render(t, c.args...)["PodDisruptionBudget/configstamp"]; got != c.want {
			t.Errorf("%v: PodDisruptionBudget rendered %v, want %v", c.args, got, c.want)
		}
	}
	// A percentage counts as Kubernetes counts minAvailable, rounded up: the budget is
	// rendered only when that leaves a pod to evict.
	for _, c := range []struct {
		pct      string
		replicas int
		want     bool
	}{
		{"50%", 1, false}, {"50%", 2, true}, {"50%", 3, true}, // 1 of 1; 1 of 2; 2 of 3
		{"67%", 1, false}, {"67%", 2, false}, {"67%", 3, false}, // 1 of 1; 2 of 2; 3 of 3
		{"100%", 1, false}, {"100%", 2, false}, {"100%", 3, false},
		{"0%", 1, true}, {"34%", 3, true}, // 0 of 1; 2 of 3
	} {
		_, got := render(t, "--set", fmt.Sprintf("replicas=%d", c.replicas), "--set-string", "podDisruptionBudget.minAvailable="+c.pct)["PodDisruptionBudget/configstamp"]
		if got != c.want {
			t.Errorf("minAvailable %s at %d replicas: PodDisruptionBudget rendered %v, want %v", c.pct, c.replicas, got, c.want)
		}
	}
	objs = render(t, "--set", "networkPolicy.enabled=true", "--set", "serviceMonitor.enabled=true", "--set", "priorityClassName=system-cluster-critical")
	for _, key := range []string{"NetworkPolicy/configstamp", "ServiceMonitor/configstamp"} {
		if _, ok := objs[key]; !ok {
			t.Errorf("%s not rendered when enabled", key)
		}
	}
	if typed[appsv1.Deployment](t, objs, "Deployment/configstamp").Spec.Template.Spec.PriorityClassName != "system-cluster-critical" {
		t.Error("priorityClassName not applied")
	}
}

// checkCertDir: in either mode the cert dir is a writable in-memory emptyDir that
// configstamp fills through the API (no Secret volume, which the kubelet refreshes late
// and on its own schedule), mounted where --webhook-cert-dir points.
func checkCertDir(t *testing.T, mode string, dep *appsv1.Deployment) {
	t.Helper()
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].ReadOnly || len(pod.Volumes) != 1 || pod.Volumes[0].Name != c.VolumeMounts[0].Name ||
		pod.Volumes[0].EmptyDir == nil || pod.Volumes[0].EmptyDir.Medium != corev1.StorageMediumMemory || pod.Volumes[0].Secret != nil {
		t.Errorf("%s mode: cert dir %+v on %+v, want one writable in-memory emptyDir", mode, c.VolumeMounts, pod.Volumes)
		return
	}
	if !slices.Contains(c.Args, "--webhook-cert-dir="+c.VolumeMounts[0].MountPath) {
		t.Errorf("%s mode: --webhook-cert-dir does not point at the mount %s: %v", mode, c.VolumeMounts[0].MountPath, c.Args)
	}
}

func TestRenderCertificates(t *testing.T) {
	objs := render(t)
	for _, key := range []string{"Issuer/configstamp-selfsigned", "Certificate/configstamp-ca", "Issuer/configstamp-ca", "Certificate/configstamp-webhook"} {
		if _, ok := objs[key]; !ok {
			t.Fatalf("cert-manager mode renders no %s", key)
		}
	}
	serving := objs["Certificate/configstamp-webhook"]
	dns, _, _ := unstructured.NestedStringSlice(serving.Object, "spec", "dnsNames")
	if !slices.Contains(dns, "configstamp."+releaseNS+".svc") {
		t.Errorf("serving certificate DNS names %v lack the Service", dns)
	}
	// Each mode has a Secret of its own name (their types differ, and a Secret's type
	// cannot change, so a shared name would make a switch of modes fail); self-signed
	// mode's keeps the name it always had, so existing installs keep their CA.
	if secret, _, _ := unstructured.NestedString(serving.Object, "spec", "secretName"); secret != "configstamp-cert-manager-tls" {
		t.Errorf("serving certificate Secret %q, want configstamp-cert-manager-tls", secret)
	}
	// configstamp reads that Secret through the API (--tls-secret, the Secret the
	// Certificate names) and keeps the caBundle; no Secret volume.
	dep := typed[appsv1.Deployment](t, objs, "Deployment/configstamp")
	checkCertDir(t, "cert-manager", dep)
	flags := processFlags(t, objs)
	if flags["--tls-secret"] != releaseNS+"/configstamp-cert-manager-tls" || flags["--ca-switch-delay"] != "1m" {
		t.Errorf("cert-manager mode: --tls-secret=%q --ca-switch-delay=%q, want %s/configstamp-cert-manager-tls and 1m",
			flags["--tls-secret"], flags["--ca-switch-delay"], releaseNS)
	}
	for f := range flags {
		if strings.HasPrefix(f, "--self-signed-") {
			t.Errorf("cert-manager mode renders %s", f)
		}
	}
	for key := range objs {
		// The hash key Secret is rendered in every mode (TestRenderHashKey).
		if strings.HasPrefix(key, "Secret/") && key != "Secret/configstamp-hash-key" {
			t.Errorf("cert-manager mode renders %s (cert-manager writes its Secrets)", key)
		}
	}
	if out, err := toolErr("helm", "template", "configstamp", chart, "--set", "certificates.mode=bogus"); err == nil {
		t.Errorf("an unknown certificates.mode renders:\n%s", out)
	}

	// self-signed mode: no cert-manager objects; an empty Secret kept across upgrades
	// and uninstall; configstamp manages it and the caBundle.
	objs = render(t, "--set", "certificates.mode=self-signed")
	for key := range objs {
		if strings.HasPrefix(key, "Certificate/") || strings.HasPrefix(key, "Issuer/") {
			t.Errorf("self-signed mode renders %s", key)
		}
	}
	secret, ok := objs["Secret/configstamp-webhook-tls"]
	if !ok || secret.GetAnnotations()["helm.sh/resource-policy"] != "keep" || secret.Object["type"] != "Opaque" {
		t.Errorf("self-signed mode: the certificate Secret configstamp-webhook-tls must be rendered, Opaque, with resource-policy keep")
	}
	if _, hasData := secret.Object["data"]; hasData {
		t.Errorf("self-signed mode: the chart must not set the Secret's data (an upgrade would reset the CA)")
	}
	mwc := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration/configstamp")
	if _, ok := mwc.Annotations["cert-manager.io/inject-ca-from"]; ok {
		t.Error("self-signed mode: registration still asks cert-manager for its CA")
	}
	dep = typed[appsv1.Deployment](t, objs, "Deployment/configstamp")
	checkCertDir(t, "self-signed", dep)
	c := dep.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--self-signed-secret="+releaseNS+"/configstamp-webhook-tls") ||
		!slices.Contains(c.Args, "--self-signed-hosts=configstamp."+releaseNS+".svc,configstamp."+releaseNS+".svc.cluster.local") ||
		!slices.Contains(c.Args, "--ca-switch-delay=1m") || slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--tls-secret") }) {
		t.Errorf("self-signed mode: process args %v", c.Args)
	}
	// caSwitchDelay reaches both modes.
	for _, mode := range []string{"cert-manager", "self-signed"} {
		if got := processFlags(t, render(t, "--set", "certificates.mode="+mode, "--set", "certificates.caSwitchDelay=90s"))["--ca-switch-delay"]; got != "90s" {
			t.Errorf("%s mode: certificates.caSwitchDelay=90s renders --ca-switch-delay=%q", mode, got)
		}
	}

	// The namespaced objects of self-signed mode are accepted by the API server (server-side
	// dry run; cert-manager mode is installed for real in TestChartInstallsAndWorksUnderItsRBAC,
	// and the cluster-scoped objects exist there already).
	dryNS := "dry-run-" + releaseNS
	tool(t, "kubectl", "create", "namespace", dryNS)
	var items []any
	for _, u := range render(t, "--namespace", dryNS, "--set", "certificates.mode=self-signed") {
		if u.GetNamespace() == dryNS {
			items = append(items, u.Object)
		}
	}
	if len(items) < 6 {
		t.Fatalf("only %d namespaced objects rendered", len(items))
	}
	list, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	path := filepath.Join(t.TempDir(), "self-signed.json")
	if err := os.WriteFile(path, list, 0o644); err != nil {
		t.Fatal(err)
	}
	tool(t, "kubectl", "create", "--dry-run=server", "-f", path)
}

// TestRenderAcceptedByAPIServer: with every option on, every object the chart renders,
// the registration's eight entries and the added RBAC included, passes the API server's
// validation (server-side dry run; namespaced objects in a namespace of their own,
// cluster-scoped ones under another name, so as not to meet the installed release).
func TestRenderAcceptedByAPIServer(t *testing.T) {
	dryNS := "dry-run-all"
	tool(t, "kubectl", "create", "namespace", dryNS)
	objs := render(t, "--namespace", dryNS, "--set", "certificates.mode=self-signed",
		"--set", "secrets.enabled=true", "--set", "argoRollouts.enabled=true",
		"--set", "networkPolicy.enabled=true", "--set", "priorityClassName=system-cluster-critical")
	var items []any
	for _, key := range slices.Sorted(maps.Keys(objs)) {
		u := objs[key]
		switch {
		case u.GetNamespace() == dryNS:
		case u.GetNamespace() == "":
			u.SetName(u.GetName() + "-" + dryNS)
			if u.GetKind() == "ClusterRoleBinding" {
				if err := unstructured.SetNestedField(u.Object, "configstamp-"+dryNS, "roleRef", "name"); err != nil {
					t.Fatal(err)
				}
			}
		default:
			t.Fatalf("%s rendered in namespace %s", key, u.GetNamespace())
		}
		items = append(items, u.Object)
	}
	list, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	path := filepath.Join(t.TempDir(), "all.json")
	if err := os.WriteFile(path, list, 0o644); err != nil {
		t.Fatal(err)
	}
	tool(t, "kubectl", "create", "--dry-run=server", "-f", path)
}

// TestRenderKustomizeBaseMatchesChart keeps deploy/kustomize in step with the chart
// ("make manifests" regenerates it).
func TestRenderKustomizeBaseMatchesChart(t *testing.T) {
	// make manifests renders for API servers that serve the self policy.
	fromChart := render(t, "--api-versions=admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy")
	out := tool(t, "kubectl", "kustomize", filepath.Join(cluster.RepoRoot(), "deploy", "kustomize"))
	fromKustomize := decodeAll(t, out)
	if ns, ok := fromKustomize["Namespace/"+releaseNS]; !ok || ns == nil {
		t.Errorf("kustomize base lacks Namespace %s", releaseNS)
	} else {
		// Pod Security: configstamp's pod meets restricted (TestRenderPodMeetsRestricted).
		for _, mode := range []string{"enforce", "warn", "audit"} {
			if got := ns.GetLabels()["pod-security.kubernetes.io/"+mode]; got != "restricted" {
				t.Errorf("kustomize Namespace: pod-security.kubernetes.io/%s=%q, want restricted", mode, got)
			}
		}
	}
	delete(fromKustomize, "Namespace/"+releaseNS)
	if len(fromKustomize) != len(fromChart) {
		t.Fatalf("kustomize base has %d objects, chart %d: run make manifests", len(fromKustomize), len(fromChart))
	}
	for key, want := range fromChart {
		got, ok := fromKustomize[key]
		if !ok {
			t.Errorf("kustomize base lacks %s: run make manifests", key)
			continue
		}
		if !equality.Semantic.DeepEqual(got.Object, want.Object) {
			t.Errorf("kustomize base differs from the chart in %s: run make manifests", key)
		}
	}
}

// TestRenderHashKey: whatever the values, the process is told the hash key Secret the
// chart creates (empty, kept on uninstall, so stamps survive a reinstall), its Role lets
// it read and fill that one Secret, and nothing in the chart grants Secret create.
func TestRenderHashKey(t *testing.T) {
	for _, set := range [][]string{nil, {"--set", "secrets.enabled=true"}, {"--set", "certificates.mode=self-signed"}} {
		objs := render(t, set...)
		flags := processFlags(t, objs)
		if got, want := flags["--hash-key"], releaseNS+"/configstamp-hash-key"; got != want {
			t.Errorf("%v: --hash-key=%q, want %q", set, got, want)
		}
		sec := typed[corev1.Secret](t, objs, "Secret/configstamp-hash-key")
		if sec.Namespace != releaseNS || len(sec.Data) != 0 || len(sec.StringData) != 0 || sec.Annotations["helm.sh/resource-policy"] != "keep" {
			t.Errorf("%v: hash key Secret %s/%s data %v stringData %v annotations %v: want it in %s, empty, kept on uninstall",
				set, sec.Namespace, sec.Name, sec.Data, sec.StringData, sec.Annotations, releaseNS)
		}
		role := typed[rbacv1.Role](t, objs, "Role/configstamp")
		var verbs []string
		for _, r := range role.Rules {
			if slices.Contains(r.Resources, "secrets") && slices.Contains(r.ResourceNames, "configstamp-hash-key") {
				verbs = append(verbs, r.Verbs...)
			}
		}
		slices.Sort(verbs)
		if role.Namespace != releaseNS || !slices.Equal(verbs, []string{"get", "update"}) {
			t.Errorf("%v: the Role (namespace %s) grants %v on the hash key Secret, want get and update", set, role.Namespace, verbs)
		}
		for key, u := range objs {
			if u.GetKind() != "ClusterRole" && u.GetKind() != "Role" {
				continue
			}
			var rules struct {
				Rules []rbacv1.PolicyRule `json:"rules"`
			}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &rules); err != nil {
				t.Fatal(err)
			}
			for _, r := range rules.Rules {
				if slices.Contains(r.Resources, "secrets") && slices.Contains(r.Verbs, "create") {
					t.Errorf("%v: %s grants Secret create: %+v", set, key, r)
				}
			}
		}
	}
}

// TestRenderFluxHelmReleases: fluxHelmReleases.enabled passes --flux-helmreleases to the
// watcher alone and grants get, list, watch and patch of HelmReleases where configstamp
// acts (the ClusterRole, or each watched namespace's Role); off, neither.
func TestRenderFluxHelmReleases(t *testing.T) {
	const flag, res = "--flux-helmreleases", "helm.toolkit.fluxcd.io/helmreleases"
	granted := func(rules []rbacv1.PolicyRule) grants {
		got := grants{}
		for _, r := range rules {
			for _, g := range r.APIGroups {
				for _, rs := range r.Resources {
					if g+"/"+rs == res {
						got.add(res, "", r.Verbs...)
					}
				}
			}
		}
		return got
	}
	want := grants{}
	want.add(res, "", "get", "list", "watch", "patch")
	for _, on := range []bool{false, true} {
		set := []string{"--set", fmt.Sprintf("fluxHelmReleases.enabled=%v", on)}
		objs := render(t, set...)
		if w, h := flagsOf(t, objs, "Deployment/configstamp-watcher")[flag], processFlags(t, objs)[flag]; (w == "true") != on || h != "" {
			t.Errorf("enabled=%v: watcher %s=%q, webhook %q", on, flag, w, h)
		}
		if single := processFlags(t, render(t, append(set, "--set", "roles.split=false")...))[flag]; (single == "true") != on {
			t.Errorf("enabled=%v, roles.split=false: %s=%q", on, flag, single)
		}
		if got := granted(typed[rbacv1.ClusterRole](t, objs, "ClusterRole/configstamp").Rules); on != maps.Equal(got, want) || (!on && len(got) > 0) {
			t.Errorf("enabled=%v: ClusterRole grants %v", on, slices.Sorted(maps.Keys(got)))
		}
		found := false
		for _, u := range renderList(t, append(set, "--set-json", `watchNamespaces=["team-a"]`)...) {
			if u.GetKind() != "Role" || u.GetName() != "configstamp" || u.GetNamespace() != "team-a" {
				continue
			}
			found = true
			if got := granted(convert[rbacv1.Role](t, u).Rules); on != maps.Equal(got, want) || (!on && len(got) > 0) {
				t.Errorf("enabled=%v, watchNamespaces: Role in team-a grants %v", on, slices.Sorted(maps.Keys(got)))
			}
		}
		if !found {
			t.Errorf("enabled=%v, watchNamespaces: no Role configstamp in team-a", on)
		}
	}
}
