package deploy

import (
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// webhookPeers is the NetworkPolicy's ingress rule for the webhook port: its peers, and
// whether the rule exists.
func webhookPeers(np *networkingv1.NetworkPolicy, port string) ([]networkingv1.NetworkPolicyPeer, bool) {
	for _, r := range np.Spec.Ingress {
		if len(r.Ports) == 1 && *r.Ports[0].Port == intstr.FromString(port) {
			return r.From, true
		}
	}
	return nil, false
}

// TestRenderNetworkPolicy: by default a NetworkPolicy lets every source reach the
// webhook port (allowAll), no pod the metrics port, and no other port; cidrs and from
// narrow the webhook port; the ambiguous and the empty choice are refused with a clear
// message; NOTES.txt warns about allowAll.
func TestRenderNetworkPolicy(t *testing.T) {
	np := typed[networkingv1.NetworkPolicy](t, render(t), "NetworkPolicy/configstamp")
	if len(np.Spec.Ingress) != 1 || !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Fatalf("default: ingress %+v, want the webhook port only", np.Spec.Ingress)
	}
	if from, ok := webhookPeers(np, "webhook"); !ok || from != nil {
		t.Errorf("default: webhook port from %v (rule %v), want every source", from, ok)
	}

	np = typed[networkingv1.NetworkPolicy](t, render(t, "--set", "networkPolicy.apiServer.allowAll=false",
		"--set", "networkPolicy.apiServer.cidrs={172.16.0.0/28,10.0.1.0/24}",
		"--set-json", `networkPolicy.apiServer.from=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"kube-system"}}}]`,
		"--set-json", `networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]`),
		"NetworkPolicy/configstamp")
	from, _ := webhookPeers(np, "webhook")
	if len(from) != 3 || from[0].IPBlock == nil || from[0].IPBlock.CIDR != "172.16.0.0/28" || from[1].IPBlock.CIDR != "10.0.1.0/24" ||
		from[2].NamespaceSelector == nil || from[2].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "kube-system" {
		t.Errorf("cidrs and from: webhook port from %+v", from)
	}
	if m, ok := webhookPeers(np, "metrics"); !ok || len(m) != 1 || m[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" {
		t.Errorf("metricsFrom: metrics port from %+v", m)
	}

	if _, ok := render(t, "--set", "networkPolicy.enabled=false")["NetworkPolicy/configstamp"]; ok {
		t.Error("networkPolicy.enabled=false renders a NetworkPolicy")
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "networkPolicy.apiServer.cidrs={10.0.0.0/8}"}, "set networkPolicy.apiServer.allowAll=false"},
		{[]string{"--set", "networkPolicy.apiServer.allowAll=false"}, "say where the API server's webhook calls come from"},
		{[]string{"--set", "networkPolicy.apiServer.allowAll=false", "--set", "networkPolicy.apiServer.cidrs={not-a-cidr}"}, "/networkPolicy/apiServer/cidrs/0"},
	} {
		if out := renderErr(t, c.args...); !strings.Contains(out, c.want) {
			t.Errorf("%v: %s, want %q", c.args, out, c.want)
		}
	}

	if text := notes(t); !strings.Contains(text, "WARNING: the NetworkPolicy lets every source reach the webhook port") {
		t.Errorf("NOTES lack the allowAll warning:\n%s", text)
	}
	text := notes(t, "--set", "networkPolicy.apiServer.allowAll=false", "--set", "networkPolicy.apiServer.cidrs={10.0.0.0/8}")
	if strings.Contains(text, "WARNING") || !strings.Contains(text, "lets only networkPolicy.apiServer reach the webhook port") {
		t.Errorf("NOTES with cidrs:\n%s", text)
	}
	if text = notes(t, "--set", "hostNetwork=true"); !strings.Contains(text, "the NetworkPolicy does not apply to host-network pods") {
		t.Errorf("NOTES with hostNetwork:\n%s", text)
	}
}

// TestRenderSelfPolicy: where the API server serves ValidatingAdmissionPolicies, the
// chart renders the two policies and their bindings, matching configstamp's own
// ServiceAccount only, denying; selfPolicy.enabled=false renders none. (What they allow
// and deny: test/kinds, against the API server.)
func TestRenderSelfPolicy(t *testing.T) {
	vap := "--api-versions=admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"
	objs := render(t, vap)
	for _, name := range []string{"configstamp-workloads", "configstamp-cronjobs", "configstamp-helmreleases", "configstamp-registration", "configstamp-hash-key"} {
		p := typed[admissionregistrationv1.ValidatingAdmissionPolicy](t, objs, "ValidatingAdmissionPolicy/"+name)
		if len(p.Spec.MatchConditions) != 1 || p.Spec.MatchConditions[0].Expression != "request.userInfo.username in ['system:serviceaccount:"+releaseNS+":configstamp', 'system:serviceaccount:"+releaseNS+":configstamp-webhook']" {
			t.Errorf("%s: match conditions %+v", name, p.Spec.MatchConditions)
		}
		if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionregistrationv1.Fail || len(p.Spec.Validations) == 0 {
			t.Errorf("%s: failurePolicy %v, %d validations", name, p.Spec.FailurePolicy, len(p.Spec.Validations))
		}
		b := typed[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, objs, "ValidatingAdmissionPolicyBinding/"+name)
		if b.Spec.PolicyName != name || !slices.Equal(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
			t.Errorf("binding %s: %+v", name, b.Spec)
		}
	}
	// The caBundle is the webhook role's alone: configstamp-webhook's with roles.split, the
	// one Deployment's configstamp without.
	for split, user := range map[string]string{"true": "configstamp-webhook", "false": "configstamp"} {
		p := typed[admissionregistrationv1.ValidatingAdmissionPolicy](t, render(t, vap, "--set", "roles.split="+split), "ValidatingAdmissionPolicy/configstamp-registration")
		want := "request.userInfo.username == 'system:serviceaccount:" + releaseNS + ":" + user + "' ||"
		if !slices.ContainsFunc(p.Spec.Validations, func(v admissionregistrationv1.Validation) bool { return strings.HasPrefix(v.Expression, want) }) {
			t.Errorf("roles.split=%s: no validation keeps the caBundle %s's (%s)", split, user, want)
		}
	}
	for key := range render(t, vap, "--set", "selfPolicy.enabled=false") {
		if strings.HasPrefix(key, "ValidatingAdmissionPolicy") {
			t.Errorf("selfPolicy.enabled=false renders %s", key)
		}
	}
}

// TestRenderClientCA: webhook.clientCA mounts the Secret's key and points
// --webhook-client-ca-file at it; by default there is neither.
func TestRenderClientCA(t *testing.T) {
	if flags := processFlags(t, render(t)); flags["--webhook-client-ca-file"] != "" {
		t.Errorf("default: --webhook-client-ca-file=%s", flags["--webhook-client-ca-file"])
	}
	objs := render(t, "--set", "webhook.clientCA.secretName=apiserver-client-ca", "--set", "webhook.clientCA.key=root.pem")
	if got := processFlags(t, objs)["--webhook-client-ca-file"]; got != "/webhook-client-ca/root.pem" {
		t.Errorf("--webhook-client-ca-file=%q", got)
	}
	out := renderText(t, chart, "--set", "webhook.clientCA.secretName=apiserver-client-ca", "--set", "webhook.clientCA.key=root.pem")
	for _, want := range []string{"secretName: apiserver-client-ca", "mountPath: /webhook-client-ca", "{key: root.pem, path: root.pem}"} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered Deployment lacks %q", want)
		}
	}
}
