package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/configstamp/configstamp/test/cluster"
)

// renderErr runs helm template with args that must fail and returns helm's message.
func renderErr(t *testing.T, args ...string) string {
	t.Helper()
	out, err := toolErr("helm", append([]string{"template", "configstamp", chart, "--namespace", releaseNS}, args...)...)
	if err == nil {
		t.Errorf("%v accepted", args)
	}
	return out
}

// TestRenderSchemaRejectsBadValues: values.schema.json (and the chart's own checks of
// values against each other) refuse a bad value before anything reaches the API server,
// with a message that names the value and what it should be.
func TestRenderSchemaRejectsBadValues(t *testing.T) {
	const schemaErr = "values don't meet the specifications of the schema(s)"
	for _, tc := range []struct {
		args []string
		want []string // every one in helm's message
	}{
		{[]string{"--set", "replicas=abc"}, []string{schemaErr, "at '/replicas': got string, want integer"}},
		{[]string{"--set", "replicas=0"}, []string{"at '/replicas': minimum: got 0, want 1"}},
		{[]string{"--set", "webhook.timeoutSeconds=60"}, []string{schemaErr, "at '/webhook/timeoutSeconds': maximum: got 60, want 30"}},
		{[]string{"--set", "webhook.timeoutSeconds=0"}, []string{"at '/webhook/timeoutSeconds': minimum: got 0, want 1"}},
		{[]string{"--set", "replicaCount=3"}, []string{schemaErr, "additional properties 'replicaCount' not allowed"}},
		{[]string{"--set", "image.name=x"}, []string{"at '/image': additional properties 'name' not allowed"}},
		{[]string{"--set", "certificates.mode=bogus"}, []string{"at '/certificates/mode': value must be one of 'cert-manager', 'self-signed'"}},
		{[]string{"--set", "webhook.failurePolicy=ignore"}, []string{"at '/webhook/failurePolicy': value must be one of 'Ignore', 'Fail'"}},
		{[]string{"--set", "logging.level=trace"}, []string{"at '/logging/level': value must be one of"}},
		{[]string{"--set", "logging.format=text"}, []string{"at '/logging/format': value must be one of 'json', 'console'"}},
		{[]string{"--set", "webhook.port=0"}, []string{"at '/webhook/port': minimum: got 0, want 1"}},
		{[]string{"--set", "metrics.port=65536"}, []string{"at '/metrics/port'", "want 65,535"}},
		{[]string{"--set", "probes.port=http"}, []string{"at '/probes/port': got string, want integer"}},
		{[]string{"--set", "debounce=2 seconds"}, []string{"at '/debounce': '2 seconds' does not match pattern"}},
		{[]string{"--set", "concurrency=0"}, []string{"at '/concurrency': minimum: got 0, want 1"}},
		{[]string{"--set", "certificates.duration=90d"}, []string{"at '/certificates/duration': '90d' does not match pattern"}},
		// configstamp refuses a --ca-switch-delay that is not positive.
		{[]string{"--set", "certificates.caSwitchDelay=0s"}, []string{"at '/certificates/caSwitchDelay'", "'0s' does not match pattern"}},
		{[]string{"--set", "certificates.caSwitchDelay=0"}, []string{"at '/certificates/caSwitchDelay'"}},
		{[]string{"--set", "certificates.caSwitchDelay=1 minute"}, []string{"at '/certificates/caSwitchDelay'", "does not match pattern"}},
		{[]string{"--set", "shutdownDelay=10"}, []string{"at '/shutdownDelay'"}},
		{[]string{"--set", "image.digest=latest"}, []string{"at '/image/digest': 'latest' does not match pattern"}},
		{[]string{"--set-string", "secrets.enabled=yes"}, []string{"at '/secrets/enabled': got string, want boolean"}},
		{[]string{"--set", "extraArgs[0]=concurrency=8"}, []string{"at '/extraArgs/0'"}},
		{[]string{"--set", "extraArgs={8,--concurrency}"}, []string{"at '/extraArgs/0': got number, want string"}},
		// YAML reads 1.10 as 1.1: a number with a fraction is refused, to be quoted.
		{[]string{"--set-json", `podLabels={"version":1.10}`}, []string{"at '/podLabels/version': got number, want boolean or integer or string"}},
		{[]string{"--set-json", `image.tag=1.10`}, []string{"at '/image/tag': got number, want integer or string"}},
		{[]string{"--set-json", `extraArgs=["--ratio",0.5]`}, []string{"at '/extraArgs/1': got number"}},
		{[]string{"--set", "serviceMonitor.interval=soon"}, []string{"at '/serviceMonitor/interval'"}},
		{[]string{"--set-string", "podDisruptionBudget.minAvailable=half"}, []string{"at '/podDisruptionBudget/minAvailable'"}},
		// What the schema cannot compare.
		// The grace period covers shutdownDelay, the 10 s of graceful shutdown and 5 s of margin.
		{[]string{"--set", "shutdownDelay=25s"}, []string{"terminationGracePeriodSeconds (30) must be at least shutdownDelay (25s) plus the 10 s", "5 s of margin", "set it to 40 or more"}},
		{[]string{"--set", "shutdownDelay=20s"}, []string{"set it to 35 or more"}}, // 20 s + 10 s = 30: no margin
		{[]string{"--set", "shutdownDelay=1m", "--set", "terminationGracePeriodSeconds=70"}, []string{"set it to 75 or more"}},
		{[]string{"--set", "metrics.port=9443"}, []string{"webhook.port (9443), metrics.port (9443) and probes.port (8081) must differ"}},
		// roles.split without leader election: more than one watcher would each run it.
		{[]string{"--set", "leaderElection.enabled=false"}, []string{"leaderElection.enabled=false with roles.split: each of the 2 watcher replicas would run the watcher; set watcher.replicas=1"}},
	} {
		out := renderErr(t, tc.args...)
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: helm says\n%s\nwant it to say %q", tc.args, out, w)
			}
		}
	}
	// Good values of the same kinds pass.
	render(t, "--set", "debounce=0", "--set", "minRolloutInterval=0s", "--set", "shutdownDelay=1m30s", "--set", "terminationGracePeriodSeconds=105",
		"--set", "certificates.duration=1h30m", "--set", "certificates.caSwitchDelay=0.5s", "--set", "webhook.timeoutSeconds=30", "--set", "serviceMonitor.interval=1m",
		"--set", "logging.level=debug", "--set", "logging.format=console", "--set", "kubeAPI.qps=2.5")
	render(t, "--set", "leaderElection.enabled=false", "--set", "watcher.replicas=1")
	render(t, "--set", "leaderElection.enabled=false", "--set", "roles.split=false")
	tool(t, "helm", "lint", chart, "--set", "metrics.secure=true", "--set", "hostNetwork=true", "--set", "serviceMonitor.enabled=true",
		"--set", "image.digest=sha256:"+strings.Repeat("0", 64), "--set", "extraArgs={--concurrency=8}")
}

// TestRenderSchemaCoversValues: values.yaml and values.schema.json name the same values,
// at every level the chart defines (helm refuses a value the schema does not name; this
// catches one the schema names that values.yaml does not document).
func TestRenderSchemaCoversValues(t *testing.T) {
	var values, schema map[string]any
	for path, into := range map[string]*map[string]any{"values.yaml": &values, "values.schema.json": &schema} {
		raw, err := os.ReadFile(filepath.Join(chart, path))
		if err != nil {
			t.Fatal(err)
		}
		if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096).Decode(into); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	if schema["$schema"] != "http://json-schema.org/draft-07/schema#" || schema["additionalProperties"] != false {
		t.Errorf("schema: want draft-07 with additionalProperties false at the top, have %v, %v", schema["$schema"], schema["additionalProperties"])
	}
	var walk func(at string, node, vals map[string]any)
	walk = func(at string, node, vals map[string]any) {
		if ref, ok := node["$ref"].(string); ok {
			node, _ = schema["definitions"].(map[string]any)[strings.TrimPrefix(ref, "#/definitions/")].(map[string]any)
		}
		props, ok := node["properties"].(map[string]any)
		if !ok {
			return
		}
		if node["additionalProperties"] != false {
			t.Errorf("schema %s: an object the chart defines, without additionalProperties: false", at)
		}
		for _, k := range slices.Sorted(maps.Keys(props)) {
			if at == "" && k == "global" {
				continue // helm's own, added when the chart is a subchart
			}
			v, ok := vals[k]
			if !ok {
				t.Errorf("schema names %s%s, values.yaml does not", at, k)
				continue
			}
			sub, _ := v.(map[string]any)
			walk(at+k+".", props[k].(map[string]any), sub)
		}
	}
	walk("", schema, values)
}

// TestRenderPodValues: every value of the pod lands where it should, and the defaults
// render as before.
func TestRenderPodValues(t *testing.T) {
	dep := typed[appsv1.Deployment](t, render(t), "Deployment/configstamp")
	pod, c := dep.Spec.Template.Spec, dep.Spec.Template.Spec.Containers[0]
	check := func(what string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("%s", what)
		}
	}
	check("default image repository:appVersion", c.Image == "ghcr.io/configstamp/configstamp:0.1.0")
	check("default: no imagePullSecrets, host network or dnsPolicy", pod.ImagePullSecrets == nil && !pod.HostNetwork && pod.DNSPolicy == "")
	check("default: no topology spread", pod.TopologySpreadConstraints == nil)
	check("default: the Deployment's default rollout strategy", dep.Spec.Strategy == appsv1.DeploymentStrategy{})
	check("default: --shutdown-delay=10s, terminationGracePeriodSeconds 30", slices.Contains(c.Args, "--shutdown-delay=10s") &&
		pod.TerminationGracePeriodSeconds != nil && *pod.TerminationGracePeriodSeconds == 30)
	check("default: ports 9443, 8080, 8081", slices.Equal(containerPorts(c), []string{"webhook=9443", "metrics=8080", "probes=8081"}) &&
		slices.Contains(c.Args, "--webhook-port=9443") && slices.Contains(c.Args, "--metrics-bind-address=:8080") &&
		slices.Contains(c.Args, "--health-probe-bind-address=:8081"))
	check("default: --metrics-secure=true", slices.Contains(c.Args, "--metrics-secure=true"))
	check("default: --concurrency=4", slices.Contains(c.Args, "--concurrency=4"))
	defaultArgs := c.Args

	digest := "sha256:" + strings.Repeat("ab", 32)
	affinity := `{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"pool","operator":"In","values":["system"]}]}]}}}`
	spread := `[{"maxSkew":1,"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"ScheduleAnyway"},` +
		`{"maxSkew":2,"topologyKey":"kubernetes.io/hostname","whenUnsatisfiable":"DoNotSchedule","labelSelector":{"matchLabels":{"tier":"x"}}}]`
	objs := render(t, "--set", "image.digest="+digest, "--set", "image.tag=9.9.9",
		"--set", "imagePullSecrets[0].name=registry", "--set-json", "affinity="+affinity, "--set-json", "topologySpreadConstraints="+spread,
		"--set", "extraArgs={--concurrency=8,--debounce=5s}", "--set", "hostNetwork=true",
		"--set", "webhook.port=10443", "--set", "metrics.port=10080", "--set", "probes.port=10081",
		"--set", "podLabels.team=platform", "--set", "podLabels.app\\.kubernetes\\.io/name=other",
		"--set", "shutdownDelay=20s", "--set", "terminationGracePeriodSeconds=45", "--set", "concurrency=32",
		"--set-json", `podSecurityContext={"runAsUser":1000,"runAsGroup":null}`,
		"--set-json", `securityContext={"privileged":false,"readOnlyRootFilesystem":null}`)
	dep = typed[appsv1.Deployment](t, objs, "Deployment/configstamp")
	pod, c = dep.Spec.Template.Spec, dep.Spec.Template.Spec.Containers[0]
	check("image.digest: repository@digest, tag ignored", c.Image == "ghcr.io/configstamp/configstamp@"+digest)
	check("imagePullSecrets", slices.Equal(pod.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "registry"}}))
	check("affinity replaces the default anti-affinity", pod.Affinity != nil && pod.Affinity.PodAntiAffinity == nil && pod.Affinity.NodeAffinity != nil &&
		pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Key == "pool")
	if tsc := pod.TopologySpreadConstraints; len(tsc) != 2 {
		t.Errorf("topologySpreadConstraints %+v, want 2", tsc)
	} else {
		own, err := metav1.LabelSelectorAsSelector(tsc[0].LabelSelector)
		check("a constraint without a labelSelector counts configstamp's pods", err == nil && tsc[0].TopologyKey == "topology.kubernetes.io/zone" &&
			!own.Empty() && own.Matches(labels.Set(dep.Spec.Template.Labels)) && equality.Semantic.DeepEqual(tsc[0].LabelSelector, dep.Spec.Selector))
		check("a constraint's own labelSelector is kept as it is", tsc[1].MaxSkew == 2 && tsc[1].WhenUnsatisfiable == corev1.DoNotSchedule &&
			equality.Semantic.DeepEqual(tsc[1].LabelSelector, &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "x"}}))
	}
	check("extraArgs appended after the chart's arguments, so they win",
		slices.Equal(c.Args[len(c.Args)-2:], []string{"--concurrency=8", "--debounce=5s"}) && slices.Contains(c.Args, "--debounce=2s") &&
			slices.Index(c.Args, "--debounce=2s") < slices.Index(c.Args, "--debounce=5s"))
	check("concurrency 32", slices.Contains(c.Args, "--concurrency=32"))
	check("hostNetwork with dnsPolicy ClusterFirstWithHostNet", pod.HostNetwork && pod.DNSPolicy == corev1.DNSClusterFirstWithHostNet)
	// One pod a node (its ports are the node's): a surge pod could wait forever for a node
	// without one, so an old pod stops first.
	check("hostNetwork: rolls with maxSurge 0, maxUnavailable 1", dep.Spec.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType &&
		dep.Spec.Strategy.RollingUpdate != nil && dep.Spec.Strategy.RollingUpdate.MaxSurge != nil && dep.Spec.Strategy.RollingUpdate.MaxSurge.IntValue() == 0 &&
		dep.Spec.Strategy.RollingUpdate.MaxUnavailable != nil && dep.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() == 1)
	check("ports follow their values: container ports and flags", slices.Equal(containerPorts(c), []string{"webhook=10443", "metrics=10080", "probes=10081"}) &&
		slices.Contains(c.Args, "--webhook-port=10443") && slices.Contains(c.Args, "--metrics-bind-address=:10080") &&
		slices.Contains(c.Args, "--health-probe-bind-address=:10081"))
	check("probes use the probes port by name", c.ReadinessProbe.HTTPGet.Port.StrVal == "probes" && c.LivenessProbe.HTTPGet.Port.StrVal == "probes")
	svc := typed[corev1.Service](t, objs, "Service/configstamp")
	for _, p := range svc.Spec.Ports {
		check("Service port "+p.Name+" targets the container port by name", p.TargetPort.StrVal == p.Name)
		check("Service metrics port follows metrics.port", p.Name != "metrics" || p.Port == 10080)
	}
	check("podLabels added to the pod, the chart's own kept", dep.Spec.Template.Labels["team"] == "platform" &&
		dep.Spec.Template.Labels["app.kubernetes.io/name"] == "configstamp")
	sel, _ := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	check("the selector still matches the pod", sel.Matches(labels.Set(dep.Spec.Template.Labels)))
	check("podLabels on the pod only", dep.Labels["team"] == "")
	check("shutdownDelay and terminationGracePeriodSeconds", slices.Contains(c.Args, "--shutdown-delay=20s") &&
		pod.TerminationGracePeriodSeconds != nil && *pod.TerminationGracePeriodSeconds == 45)
	// Helm merges a map value into the default key by key; null removes a key.
	check("podSecurityContext merged into the default", pod.SecurityContext != nil && *pod.SecurityContext.RunAsUser == 1000 &&
		pod.SecurityContext.RunAsGroup == nil && *pod.SecurityContext.RunAsNonRoot && pod.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault)
	check("securityContext merged into the default", c.SecurityContext != nil && c.SecurityContext.ReadOnlyRootFilesystem == nil &&
		c.SecurityContext.Privileged != nil && !*c.SecurityContext.Privileged && !*c.SecurityContext.AllowPrivilegeEscalation &&
		slices.Equal(c.SecurityContext.Capabilities.Drop, []corev1.Capability{"ALL"}))
	// Nothing else of the process changed.
	changed := func(a string) bool {
		for _, f := range []string{"--webhook-port=", "--metrics-bind-address=", "--health-probe-bind-address=", "--shutdown-delay=", "--concurrency="} {
			if strings.HasPrefix(a, f) {
				return true
			}
		}
		return false
	}
	check("the other arguments are the defaults'", slices.Equal(
		slices.DeleteFunc(slices.Clone(c.Args[:len(c.Args)-2]), changed), slices.DeleteFunc(defaultArgs, changed)))
}

// containerPorts lists a container's ports as name=port.
func containerPorts(c corev1.Container) []string {
	var out []string
	for _, p := range c.Ports {
		out = append(out, fmt.Sprintf("%s=%d", p.Name, p.ContainerPort))
	}
	return out
}

// TestRenderMetricsSecure: metrics.secure (on by default) turns on --metrics-secure and makes the
// ServiceMonitor scrape over HTTPS with a token (RBAC: TestRenderRBACLeastPrivilege).
func TestRenderMetricsSecure(t *testing.T) {
	for _, c := range []struct {
		set    []string
		secure bool
	}{{nil, true}, {[]string{"--set", "metrics.secure=false"}, false}, {[]string{"--set", "metrics.secure=true"}, true}} {
		secure := c.secure
		objs := render(t, append([]string{"--set", "serviceMonitor.enabled=true"}, c.set...)...)
		flags := processFlags(t, objs)
		if got := flags["--metrics-secure"]; got != fmt.Sprint(secure) {
			t.Errorf("metrics.secure=%v: --metrics-secure=%q", secure, got)
		}
		sm, ok := objs["ServiceMonitor/configstamp"]
		if !ok {
			t.Fatal("ServiceMonitor not rendered")
		}
		endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		if len(endpoints) != 1 {
			t.Fatalf("ServiceMonitor endpoints %v", endpoints)
		}
		ep := endpoints[0].(map[string]any)
		scheme, _, _ := unstructured.NestedString(ep, "scheme")
		token, _, _ := unstructured.NestedString(ep, "bearerTokenFile")
		skip, _, _ := unstructured.NestedBool(ep, "tlsConfig", "insecureSkipVerify")
		if secure && (scheme != "https" || token != "/var/run/secrets/kubernetes.io/serviceaccount/token" || !skip) {
			t.Errorf("metrics.secure: endpoint %v, want https with the ServiceAccount token, certificate not verified", ep)
		}
		if !secure && (scheme == "https" || token != "" || skip) {
			t.Errorf("plain metrics: endpoint %v", ep)
		}
		if ep["port"] != "metrics" {
			t.Errorf("ServiceMonitor scrapes port %v, want metrics", ep["port"])
		}
	}
}

// notes renders NOTES.txt as helm install prints it (a client-side dry run).
func notes(t *testing.T, args ...string) string {
	t.Helper()
	return notesFrom(t, chart, args...)
}

// notesFrom renders the NOTES.txt of the chart in dir.
func notesFrom(t *testing.T, dir string, args ...string) string {
	t.Helper()
	applyCertManagerCRDs(t) // a client-side dry run still maps every kind through the API server
	out := tool(t, "helm", append([]string{"install", "configstamp", dir, "--namespace", releaseNS, "--dry-run=client"}, args...)...)
	_, text, ok := strings.Cut(out, "\nNOTES:\n")
	if !ok {
		t.Fatalf("helm install prints no NOTES:\n%s", out)
	}
	return text
}

// notesCheck is the check NOTES.txt tells the user to run, for namespace ns: a shell
// pipeline printing the annotations a server-side dry run of a Deployment gets.
func notesCheck(t *testing.T, text, ns string) string {
	t.Helper()
	lines := strings.Split(text, "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), "echo '") })
	end := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "kubectl -n NAMESPACE create --dry-run=server") })
	if start < 0 || end < start {
		t.Fatalf("NOTES has no dry-run check:\n%s", text)
	}
	return strings.ReplaceAll(strings.Join(lines[start:end+1], "\n"), "NAMESPACE", ns)
}

// runShell runs a shell command line as a user would, against the test cluster.
func runShell(t *testing.T, script string) string {
	t.Helper()
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Cluster.Kubeconfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	return string(out)
}

// TestRenderNotes: helm install prints how to opt in (with the label in use), how to
// check that it works, the certificate mode and what uninstall leaves (run for real in
// TestChartInstallsAndWorksUnderItsRBAC).
func TestRenderNotes(t *testing.T) {
	text := notes(t)
	for _, want := range []string{
		"kubectl label namespace NAMESPACE configstamp.io/inject=enabled",
		"kubectl -n NAMESPACE label deployment NAME configstamp.io/inject=enabled",
		"configstamp.io/skip=true",
		"create --dry-run=server",
		"apply --dry-run=server",
		"configstamp.io/config-hash",
		"Never acted in, whatever their labels: " + releaseNS + ", kube-system.",
		"Certificates: cert-manager mode.",
		"its CA injector is not used",
		"keeps the registration's\n   caBundle: a new CA is added there 1m before configstamp serves",
		"kubectl -n " + releaseNS + " delete secret configstamp-ca configstamp-cert-manager-tls",
		// Every replica's logs, both roles', not one pod's; and which one leads.
		"kubectl -n " + releaseNS + " logs -l 'app.kubernetes.io/name in (configstamp,configstamp-watcher)' --prefix",
		"the\n   watcher runs on the leader only (a pod of configstamp-watcher)",
		"kubectl -n " + releaseNS + " get lease configstamp-watcher -o jsonpath='{.spec.holderIdentity}",
		"holderIdentity:\n   the pod's name",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("NOTES lack %q:\n%s", want, text)
		}
	}
	if !strings.Contains(text, "configstamp-hash-key") {
		t.Errorf("NOTES with default values do not mention the hash key Secret configstamp-hash-key:\n%s", text)
	}
	for _, unwanted := range []string{"configstamp-webhook-tls", "hostNetwork", "logs deployment/configstamp", "maxSurge"} {
		if strings.Contains(text, unwanted) {
			t.Errorf("NOTES with default values mention %q:\n%s", unwanted, text)
		}
	}
	checkNotesCheckPassesPolicies(t, text)

	text = notes(t, "--set", "certificates.mode=self-signed", "--set", "namespaceLabel=example.com/stamp", "--set", "secrets.enabled=true",
		"--set", "metrics.secure=true", "--set", "hostNetwork=true", "--set", "extraArgs={--leader-election-id,elected}")
	for _, want := range []string{
		"kubectl label namespace NAMESPACE example.com/stamp=enabled",
		"Certificates: self-signed mode.",
		"helm uninstall leaves that Secret",
		"kubectl -n " + releaseNS + " delete secret configstamp-webhook-tls",
		"configstamp-hash-key",
		"--clusterrole configstamp-metrics-reader",
		"pod-security.kubernetes.io/enforce=privileged",
		"maxSurge 0,\nmaxUnavailable 1",
		"get lease elected -o jsonpath",
		// roles.split: the watcher's pods, which hold the Lease, are not host-network.
		"holderIdentity:\n   the pod's name",
		"leaves the leader-election Lease elected",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("NOTES (self-signed, all options) lack %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "the node's host name") {
		t.Errorf("NOTES with roles.split and hostNetwork name the node's host name as the leader's identity (the watcher is not host-network):\n%s", text)
	}
	// One Deployment (roles.split false): the host-network pods hold the Lease.
	if text := notes(t, "--set", "hostNetwork=true", "--set", "roles.split=false"); !strings.Contains(text, "holderIdentity:\n   the node's host name") {
		t.Errorf("NOTES with hostNetwork and roles.split false lack the node's host name as the leader's identity:\n%s", text)
	}
	if strings.Contains(text, "configstamp-cert-manager-tls") || strings.Contains(text, "configstamp.io/inject=enabled") {
		t.Errorf("NOTES in self-signed mode with another label:\n%s", text)
	}
}

// checkNotesCheckPassesPolicies: the Deployment of the check NOTES.txt (text) gives
// carries what admission policies commonly require (resource requests and limits, a
// restricted security context), and Pod Security admission at restricted has nothing to
// say about it.
func checkNotesCheckPassesPolicies(t *testing.T, text string) {
	t.Helper()
	ns := "notes-check-restricted"
	script := notesCheck(t, text, ns)
	_, raw, _ := strings.Cut(script, "echo '")
	raw, _, _ = strings.Cut(raw, "' |")
	var dep appsv1.Deployment
	if err := json.Unmarshal([]byte(raw), &dep); err != nil {
		t.Fatalf("the check's Deployment: %v\n%s", err, raw)
	}
	pod := dep.Spec.Template.Spec
	check := func(what string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("the check's Deployment: %s: %s", what, raw)
		}
	}
	check("runs as non-root, seccomp RuntimeDefault", pod.SecurityContext != nil && pod.SecurityContext.RunAsNonRoot != nil && *pod.SecurityContext.RunAsNonRoot &&
		pod.SecurityContext.SeccompProfile != nil && pod.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault)
	check("one container", len(pod.Containers) == 1)
	c := pod.Containers[0]
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		_, req := c.Resources.Requests[r]
		_, lim := c.Resources.Limits[r]
		check("requests and limits of "+string(r), req && lim)
	}
	sc := c.SecurityContext
	check("no privilege escalation, every capability dropped, read-only root", sc != nil && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation &&
		sc.Capabilities != nil && slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) && sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem)
	if _, err := toolErr("kubectl", "get", "namespace", ns); err != nil {
		tool(t, "kubectl", "create", "namespace", ns)
		tool(t, "kubectl", "label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/warn=restricted")
	}
	if out := runShell(t, script+" 2>&1"); strings.Contains(out, "PodSecurity") || strings.Contains(out, "Warning") {
		t.Errorf("the check in a restricted namespace:\n%s", out)
	}
}

// TestRenderPodMeetsRestricted: the chart's pod, in either certificate mode and with
// the options on, is admitted by Pod Security admission in a namespace labelled as the
// kustomize base labels configstamp's (enforce restricted); with hostNetwork it is not,
// as documented.
func TestRenderPodMeetsRestricted(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "deploy", "kustomize", "namespace.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var nsObj corev1.Namespace
	if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096).Decode(&nsObj); err != nil {
		t.Fatal(err)
	}
	if nsObj.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Fatalf("kustomize Namespace labels %v: enforce restricted wanted", nsObj.Labels)
	}
	ns := "restricted-check"
	tool(t, "kubectl", "create", "namespace", ns)
	for k, v := range nsObj.Labels {
		tool(t, "kubectl", "label", "namespace", ns, k+"="+v)
	}
	tool(t, "kubectl", "--namespace", ns, "create", "serviceaccount", "configstamp")
	tool(t, "kubectl", "--namespace", ns, "create", "serviceaccount", "configstamp-webhook")
	podFrom := func(args ...string) string {
		t.Helper()
		dep := typed[appsv1.Deployment](t, render(t, append([]string{"--namespace", ns}, args...)...), "Deployment/configstamp")
		pod := corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "configstamp", Labels: dep.Spec.Template.Labels, Annotations: dep.Spec.Template.Annotations},
			Spec:       dep.Spec.Template.Spec}
		b, err := json.Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "pod.json")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, args := range [][]string{
		nil,
		{"--set", "certificates.mode=self-signed", "--set", "secrets.enabled=true", "--set", "metrics.secure=true",
			"--set", "imagePullSecrets[0].name=registry", "--set", "extraArgs={--concurrency=8}", "--set", "podLabels.team=platform",
			"--set-json", `topologySpreadConstraints=[{"maxSkew":1,"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"ScheduleAnyway"}]`},
	} {
		out := tool(t, "kubectl", "create", "--dry-run=server", "-f", podFrom(args...))
		if strings.Contains(out, "PodSecurity") {
			t.Errorf("%v: Pod Security warns:\n%s", args, out)
		}
	}
	out, err := toolErr("kubectl", "create", "--dry-run=server", "-f", podFrom("--set", "hostNetwork=true"))
	if err == nil || !strings.Contains(out, `violates PodSecurity "restricted`) || !strings.Contains(out, "hostNetwork") {
		t.Errorf("a host-network pod in a restricted namespace: %v\n%s", err, out)
	}
}

// TestRenderScalarValues: where the chart wants text (an image tag, the values of labels,
// annotations and a node selector, extraArgs), a whole number or a boolean, as helm --set
// passes 2 and true and a values file has them (a whole number read as a float), is taken
// as its text, as the API wants it; and a value set to null takes its default rather than
// failing or rendering an empty flag.
func TestRenderScalarValues(t *testing.T) {
	fromSet := []string{"--set", "image.tag=20240101", "--set", "podLabels.version=2", "--set", "podAnnotations.x=true",
		"--set", "nodeSelector.gpu=true", "--set", "extraArgs={--concurrency,8}",
		"--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.labels.release=1",
		"--set", "grafanaDashboard.enabled=true", "--set", "grafanaDashboard.labels.grafana_dashboard=1", "--set", "grafanaDashboard.annotations.order=2"}
	file := writeValues(t, `
image: {tag: 20240101}
podLabels: {version: 2}
podAnnotations: {x: true}
nodeSelector: {gpu: true}
extraArgs: [--concurrency, 8]
serviceMonitor: {enabled: true, labels: {release: 1}}
grafanaDashboard: {enabled: true, labels: {grafana_dashboard: 1}, annotations: {order: 2}}
`)
	for name, args := range map[string][]string{"--set": fromSet, "values file": {"-f", file}} {
		objs := render(t, args...) // typed and NestedStringMap fail on a label that is not a string
		dep := typed[appsv1.Deployment](t, objs, "Deployment/configstamp")
		pod, c := dep.Spec.Template, dep.Spec.Template.Spec.Containers[0]
		check := func(what string, ok bool) {
			t.Helper()
			if !ok {
				t.Errorf("%s: %s", name, what)
			}
		}
		check("image tag 20240101: "+c.Image, c.Image == "ghcr.io/configstamp/configstamp:20240101")
		check("podLabels.version 2", pod.Labels["version"] == "2")
		check("podAnnotations.x true", pod.Annotations["x"] == "true")
		check("nodeSelector.gpu true", pod.Spec.NodeSelector["gpu"] == "true")
		check(fmt.Sprintf("extraArgs --concurrency 8 last: %q", c.Args), slices.Equal(c.Args[len(c.Args)-2:], []string{"--concurrency", "8"}))
		for key, want := range map[string]map[string]string{
			"ServiceMonitor/configstamp": {"release": "1"}, "ConfigMap/configstamp-dashboard": {"grafana_dashboard": "1"},
		} {
			u, ok := objs[key]
			if !ok {
				t.Fatalf("%s: no %s", name, key)
			}
			labels, _, err := unstructured.NestedStringMap(u.Object, "metadata", "labels")
			for k, v := range want {
				check(fmt.Sprintf("%s label %s %s: %v (%v)", key, k, v, u.GetLabels(), err), err == nil && labels[k] == v)
			}
		}
		annotations, _, err := unstructured.NestedStringMap(objs["ConfigMap/configstamp-dashboard"].Object, "metadata", "annotations")
		check(fmt.Sprintf("dashboard annotation order 2: %v (%v)", annotations, err), err == nil && annotations["order"] == "2")
	}

	// null (helm deletes the value) takes the default: the chart renders as by default.
	want := renderText(t, chart)
	for _, args := range [][]string{
		{"--set", "shutdownDelay=null", "--set", "excludeNamespaces=null", "--set", "metrics.port=null", "--set", "certificates.caSwitchDelay=null",
			"--set", "extraArgs=null", "--set", "podSecurityContext=null", "--set", "terminationGracePeriodSeconds=null"},
		{"-f", writeValues(t, "shutdownDelay: null\nexcludeNamespaces: null\nmetrics: {port: null, secure: null}\nwebhook: null\nhostNetwork: null\n")},
	} {
		if got := renderText(t, chart, args...); got != want {
			t.Errorf("%v: renders otherwise than by default: %s", args, firstDifference(got, want))
		}
	}
}

// writeValues writes a values file and returns its path.
func writeValues(t *testing.T, values string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(path, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// firstDifference describes the first line where got and want differ.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d is %q, want %q", i+1, gl, wl)
		}
	}
	return "the same"
}

// chartCopy copies the chart into a new directory, named configstamp, and returns its path.
func chartCopy(t *testing.T, into string) string {
	t.Helper()
	dir := filepath.Join(into, "configstamp")
	if err := os.CopyFS(dir, os.DirFS(chart)); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRenderAsSubchart: the chart as a dependency of another chart, which hands it its
// values with helm's global added (values.schema.json admits global).
func TestRenderAsSubchart(t *testing.T) {
	parent := t.TempDir()
	if err := os.WriteFile(filepath.Join(parent, "Chart.yaml"), []byte("apiVersion: v2\nname: platform\nversion: 1.0.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(parent, "charts"), 0o755); err != nil {
		t.Fatal(err)
	}
	chartCopy(t, filepath.Join(parent, "charts"))
	out := tool(t, "helm", "template", "platform", parent, "--namespace", releaseNS, "--set", "global.imageRegistry=registry.example", "--set", "configstamp.replicas=3")
	if dep := typed[appsv1.Deployment](t, decodeAll(t, out), "Deployment/configstamp"); *dep.Spec.Replicas != 3 {
		t.Errorf("as a subchart: replicas %d, want the parent's 3", *dep.Spec.Replicas)
	}
	render(t, "--set", "global.imageRegistry=registry.example")
}
