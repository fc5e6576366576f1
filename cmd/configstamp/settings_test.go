package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func installDeployment(ns, name string, podLabels map[string]string, container string, args ...string) appsv1.Deployment {
	return appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: appsv1.DeploymentSpec{
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: container, Command: []string{"/configstamp"}, Args: args}}}}}}
}

// The Deployment is the one in the Service's namespace whose pods it selects, running
// the container configstamp; a look-alike elsewhere never counts.
func TestSelected(t *testing.T) {
	ours := map[string]string{"app.kubernetes.io/name": "configstamp", "app.kubernetes.io/instance": "cs"}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "cs", Name: "configstamp"}, Spec: corev1.ServiceSpec{Selector: ours}}
	tenant := installDeployment("tenant", "configstamp", ours, "configstamp", "--max-sources=1")
	install := installDeployment("cs", "configstamp", ours, "configstamp", "--max-sources=2")
	sidecar := installDeployment("cs", "other", ours, "proxy")
	unselected := installDeployment("cs", "unselected", map[string]string{"app.kubernetes.io/name": "configstamp"}, "configstamp")
	for _, tc := range []struct {
		name    string
		deps    []appsv1.Deployment
		want    string
		problem string
	}{
		{name: "ours among others", deps: []appsv1.Deployment{tenant, sidecar, unselected, install}, want: "configstamp"},
		{name: "only a tenant's look-alike", deps: []appsv1.Deployment{tenant}, problem: "no deployment in namespace cs"},
		{name: "two", deps: []appsv1.Deployment{install, installDeployment("cs", "second", ours, "configstamp")}, problem: "several deployments in namespace cs run pods that service configstamp selects (configstamp, second): pass --install"},
	} {
		d, problem := selected(svc, tc.deps)
		switch {
		case tc.want != "" && (d == nil || d.Namespace != "cs" || d.Name != tc.want):
			t.Errorf("%s: got %v (%s), want cs/%s", tc.name, d, problem, tc.want)
		case tc.want == "" && (d != nil || !strings.HasPrefix(problem, tc.problem)):
			t.Errorf("%s: got %v %q, want none: %q", tc.name, d, problem, tc.problem)
		}
	}
	if d, problem := selected(&corev1.Service{ObjectMeta: svc.ObjectMeta}, []appsv1.Deployment{install}); d != nil || !strings.Contains(problem, "selects no pods") {
		t.Errorf("a Service without a selector: %v %q", d, problem)
	}
	if args, ok := containerArgs(&install); !ok || strings.Join(args, " ") != "--max-sources=2" {
		t.Errorf("containerArgs: %q %v", args, ok)
	}
}

// The install's args are read with the server's parser; the server's flags given to the
// command win; args it cannot parse give the defaults and a problem.
func TestParseSettings(t *testing.T) {
	cmd := &cobra.Command{}
	var sf settingsFlags
	sf.bind(cmd)
	if err := cmd.Flags().Parse([]string{"--max-sources", "5", "--secrets"}); err != nil {
		t.Fatal(err)
	}
	chart := []string{"--leader-elect=true", "--namespace-label=example.com/in", "--watch-namespaces=team-a,team-b",
		"--coverage-configmap=cs/configstamp-coverage", "--max-sources=2", "--secrets=false", "--hash-key=cs/key", "--zap-log-level=info"}
	o, problem, err := parseSettings(chart, cmd.Flags())
	if err != nil || problem != "" {
		t.Fatal(problem, err)
	}
	if o.bounds.maxSources != 5 || !o.secrets || o.watchNamespaces != "team-a,team-b" || o.coverageConfigMap != "cs/configstamp-coverage" ||
		o.namespaceLabel != "example.com/in" || o.hashKey != "cs/key" {
		t.Errorf("got %+v", o)
	}
	o, problem, err = parseSettings([]string{"--a-flag-of-a-newer-server"}, cmd.Flags())
	if err != nil || !strings.Contains(problem, "a-flag-of-a-newer-server") || o.bounds.maxSources != 5 || o.watchNamespaces != "" {
		t.Errorf("unparseable args: %+v %q %v", o, problem, err)
	}
}
