package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/webhook"
)

const releaseNS = "configstamp-system"

// render runs helm template and returns the objects by "Kind/name".
func render(t *testing.T, args ...string) map[string]*unstructured.Unstructured {
	t.Helper()
	out := tool(t, "helm", append([]string{"template", "configstamp", chart, "--namespace", releaseNS}, args...)...)
	return decodeAll(t, out)
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

func TestChartLints(t *testing.T) {
	tool(t, "helm", "lint", chart)
}

func TestChartRegistration(t *testing.T) {
	objs := render(t)
	mwc := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration/configstamp")
	if len(mwc.Webhooks) != 1 {
		t.Fatalf("%d webhooks, want 1", len(mwc.Webhooks))
	}
	w := mwc.Webhooks[0]
	check := func(what string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("registration: %s", what)
		}
	}
	check("entry named "+webhook.EntryName, w.Name == webhook.EntryName)
	check("one rule: apps/v1 deployments CREATE and UPDATE only", len(w.Rules) == 1 &&
		slices.Equal(w.Rules[0].APIGroups, []string{"apps"}) && slices.Equal(w.Rules[0].APIVersions, []string{"v1"}) &&
		slices.Equal(w.Rules[0].Resources, []string{"deployments"}) &&
		slices.Equal(w.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}))
	check("sideEffects None", w.SideEffects != nil && *w.SideEffects == admissionregistrationv1.SideEffectClassNone)
	check("reinvocationPolicy IfNeeded", w.ReinvocationPolicy != nil && *w.ReinvocationPolicy == admissionregistrationv1.IfNeededReinvocationPolicy)
	check("failurePolicy Ignore by default", w.FailurePolicy != nil && *w.FailurePolicy == admissionregistrationv1.Ignore)
	check("timeoutSeconds 5 by default", w.TimeoutSeconds != nil && *w.TimeoutSeconds == 5)
	check("admissionReviewVersions [v1]", slices.Equal(w.AdmissionReviewVersions, []string{"v1"}))
	check("calls the Service at the webhook path", w.ClientConfig.Service != nil && w.ClientConfig.Service.Name == "configstamp" &&
		w.ClientConfig.Service.Namespace == releaseNS && w.ClientConfig.Service.Path != nil && *w.ClientConfig.Service.Path == webhook.Path)
	sel := w.NamespaceSelector
	check("namespaceSelector: opt-in label", sel != nil && sel.MatchLabels[stamp.InjectLabel] == stamp.InjectValue)
	check("namespaceSelector: not its own namespace, not kube-system", sel != nil && len(sel.MatchExpressions) == 1 &&
		sel.MatchExpressions[0].Key == "kubernetes.io/metadata.name" && string(sel.MatchExpressions[0].Operator) == "NotIn" &&
		slices.Contains(sel.MatchExpressions[0].Values, releaseNS) && slices.Contains(sel.MatchExpressions[0].Values, "kube-system"))
	// The watcher acts exactly where the registration sends admissions: the selector is
	// the one configstamp builds from the flags the chart passes it.
	checkOneScope(t, objs)
	checkOneScope(t, render(t, "--set", "excludeNamespaces={kube-system,kube-public,"+releaseNS+"}", "--set", "namespaceLabel=example.com/stamp"))
	check("cert-manager injects the CA", mwc.Annotations["cert-manager.io/inject-ca-from"] == releaseNS+"/configstamp-webhook")

	// Values reach the registration and the process.
	objs = render(t, "--set", "webhook.failurePolicy=Fail", "--set", "webhook.timeoutSeconds=10", "--set", "namespaceLabel=example.com/stamp")
	mwc = typed[admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration/configstamp")
	w = mwc.Webhooks[0]
	if *w.FailurePolicy != admissionregistrationv1.Fail || *w.TimeoutSeconds != 10 || w.NamespaceSelector.MatchLabels["example.com/stamp"] != "enabled" {
		t.Errorf("values not applied: %+v", w)
	}
	dep := typed[appsv1.Deployment](t, objs, "Deployment/configstamp")
	if !slices.Contains(dep.Spec.Template.Spec.Containers[0].Args, "--namespace-label=example.com/stamp") {
		t.Errorf("namespaceLabel does not reach the process: %v", dep.Spec.Template.Spec.Containers[0].Args)
	}
}

// checkOneScope compares the rendered registration's namespaceSelector with the one
// configstamp derives from the --namespace-label and --exclude-namespaces it is given.
func checkOneScope(t *testing.T, objs map[string]*unstructured.Unstructured) {
	t.Helper()
	mwc := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration/configstamp")
	dep := typed[appsv1.Deployment](t, objs, "Deployment/configstamp")
	flags := map[string]string{}
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		if k, v, ok := strings.Cut(a, "="); ok {
			flags[k] = v
		}
	}
	sc, err := scope.New(flags["--namespace-label"], strings.Split(flags["--exclude-namespaces"], ","))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := mwc.Webhooks[0].NamespaceSelector, sc.NamespaceSelector(); !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("registration selector %+v, but configstamp acts on %+v", got, want)
	}
}

func TestChartReadTimeoutFollowsWebhookTimeout(t *testing.T) {
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

func TestChartRBACLeastPrivilege(t *testing.T) {
	for _, mode := range []string{"cert-manager", "self-signed"} {
		t.Run(mode, func(t *testing.T) {
			objs := render(t, "--set", "certificates.mode="+mode)
			cr := typed[rbacv1.ClusterRole](t, objs, "ClusterRole/configstamp")
			role := typed[rbacv1.Role](t, objs, "Role/configstamp")
			type grant struct {
				verbs []string
				names []string
			}
			clusterWide := map[string]grant{
				"/configmaps":      {verbs: []string{"get", "list", "watch"}},
				"apps/deployments": {verbs: []string{"get", "list", "watch", "patch"}},
				"/namespaces":      {verbs: []string{"get", "list", "watch"}},
				"apps/replicasets": {verbs: []string{"list"}},
				"authentication.k8s.io/selfsubjectreviews":                   {verbs: []string{"create"}},
				"admissionregistration.k8s.io/mutatingwebhookconfigurations": {verbs: []string{"get"}, names: []string{"configstamp"}},
				"events.k8s.io/events":                                       {verbs: []string{"create", "patch"}},
				"/events":                                                    {verbs: []string{"create", "patch"}},
			}
			namespaced := map[string]grant{"coordination.k8s.io/leases": {verbs: []string{"get", "create", "update"}}}
			if mode == "self-signed" {
				clusterWide["admissionregistration.k8s.io/mutatingwebhookconfigurations"] = grant{verbs: []string{"get", "update"}, names: []string{"configstamp"}}
				namespaced["/secrets"] = grant{verbs: []string{"get", "update"}, names: []string{"configstamp-webhook-tls"}}
			}
			checkRules := func(kind string, rules []rbacv1.PolicyRule, allowed map[string]grant) {
				seen := map[string]bool{}
				for _, r := range rules {
					for _, g := range r.APIGroups {
						for _, res := range r.Resources {
							key := g + "/" + res
							seen[key] = true
							want, ok := allowed[key]
							if !ok {
								t.Errorf("%s grants %s", kind, key)
								continue
							}
							if !slices.Equal(r.Verbs, want.verbs) || !slices.Equal(r.ResourceNames, want.names) {
								t.Errorf("%s on %s: verbs %v names %v, want %v %v", kind, key, r.Verbs, r.ResourceNames, want.verbs, want.names)
							}
						}
					}
				}
				for key := range allowed {
					if !seen[key] {
						t.Errorf("%s lacks %s", kind, key)
					}
				}
			}
			checkRules("ClusterRole", cr.Rules, clusterWide)
			checkRules("Role", role.Rules, namespaced)
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
		})
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

func TestChartPodSecurityAndAvailability(t *testing.T) {
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
	check("leader election on", slices.Contains(c.Args, "--leader-elect=true"))
	check("runs as non-root 65532", pod.SecurityContext != nil && pod.SecurityContext.RunAsNonRoot != nil && *pod.SecurityContext.RunAsNonRoot &&
		pod.SecurityContext.RunAsUser != nil && *pod.SecurityContext.RunAsUser == 65532)
	check("seccomp RuntimeDefault", pod.SecurityContext.SeccompProfile != nil && pod.SecurityContext.SeccompProfile.Type == "RuntimeDefault")
	sc := c.SecurityContext
	check("read-only root filesystem", sc != nil && sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem)
	check("all capabilities dropped", sc != nil && sc.Capabilities != nil && slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}))
	check("no privilege escalation", sc != nil && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation)
	check("readiness and liveness probes", c.ReadinessProbe != nil && c.LivenessProbe != nil &&
		c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Path == "/readyz")
	check("anti-affinity across nodes", pod.Affinity != nil && pod.Affinity.PodAntiAffinity != nil &&
		len(pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 1)
	check("certificate Secret mounted without subPath", len(c.VolumeMounts) == 1 && c.VolumeMounts[0].SubPath == "" &&
		len(pod.Volumes) == 1 && pod.Volumes[0].Secret != nil && pod.Volumes[0].Secret.SecretName == "configstamp-webhook-tls")
	check("cert dir flag points at the mount", slices.Contains(c.Args, "--webhook-cert-dir="+c.VolumeMounts[0].MountPath))
	pdb := typed[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget/configstamp")
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PDB minAvailable %v, want 1", pdb.Spec.MinAvailable)
	}
	if _, ok := objs["NetworkPolicy/configstamp"]; ok {
		t.Error("NetworkPolicy rendered though disabled")
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

func TestChartCertificates(t *testing.T) {
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
	if secret, _, _ := unstructured.NestedString(serving.Object, "spec", "secretName"); secret != "configstamp-webhook-tls" {
		t.Errorf("serving certificate Secret %q, want the mounted configstamp-webhook-tls", secret)
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
	if !ok || secret.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
		t.Errorf("self-signed mode: the certificate Secret must be rendered with resource-policy keep")
	}
	if _, hasData := secret.Object["data"]; hasData {
		t.Errorf("self-signed mode: the chart must not set the Secret's data (an upgrade would reset the CA)")
	}
	mwc := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration/configstamp")
	if _, ok := mwc.Annotations["cert-manager.io/inject-ca-from"]; ok {
		t.Error("self-signed mode: registration still asks cert-manager for its CA")
	}
	c := typed[appsv1.Deployment](t, objs, "Deployment/configstamp").Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--self-signed-secret="+releaseNS+"/configstamp-webhook-tls") ||
		!slices.Contains(c.Args, "--self-signed-hosts=configstamp."+releaseNS+".svc,configstamp."+releaseNS+".svc.cluster.local") {
		t.Errorf("self-signed mode: process args %v", c.Args)
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

// TestKustomizeBaseMatchesChart keeps deploy/kustomize in step with the chart
// ("make manifests" regenerates it).
func TestKustomizeBaseMatchesChart(t *testing.T) {
	fromChart := render(t)
	out := tool(t, "kubectl", "kustomize", filepath.Join(cluster.RepoRoot(), "deploy", "kustomize"))
	fromKustomize := decodeAll(t, out)
	if ns, ok := fromKustomize["Namespace/"+releaseNS]; !ok || ns == nil {
		t.Errorf("kustomize base lacks Namespace %s", releaseNS)
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
