package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/configstamp/configstamp/internal/workload"
)

func TestIsCLI(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"/usr/bin/kubectl-configstamp", "explain", "deploy/x"}, true},
		{[]string{"/usr/bin/kubectl-configstamp"}, true},
		{[]string{"configstamp", "explain", "deploy/x"}, true},
		{[]string{"configstamp", "impact", "cm/x"}, true},
		{[]string{"configstamp", "hash", "-f", "-"}, true},
		{[]string{"configstamp"}, false},
		{[]string{"configstamp", "--version"}, false},
		{[]string{"configstamp", "--kubeconfig", "explain"}, false},
	} {
		if got := isCLI(tc.args); got != tc.want {
			t.Errorf("isCLI(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

func TestParseWorkload(t *testing.T) {
	for in, want := range map[string]*workload.Kind{
		"deployment/a": workload.Deployment, "deploy/a": workload.Deployment, "deployments.apps/a": workload.Deployment,
		"sts/a": workload.StatefulSet, "ds/a": workload.DaemonSet, "rollout/a": workload.Rollout,
	} {
		k, name, err := parseWorkload([]string{in})
		if err != nil || k != want || name != "a" {
			t.Errorf("%s: %v %q %v", in, k, name, err)
		}
	}
	for _, in := range []string{"pod/a", "deployment", "deployment/"} {
		if _, _, err := parseWorkload([]string{in}); err == nil {
			t.Errorf("%s: no error", in)
		}
	}
}

func TestCLIErrorsExitNonZero(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := runCLI(false, []string{"explain", "pod/a"}, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), "unsupported kind") {
		t.Errorf("exit %d, stderr %q", code, errOut.String())
	}
	if code := runCLI(false, []string{"explain", "deploy/a", "-o", "xml", "--kubeconfig", "/nonexistent"}, &out, &errOut); code == 0 {
		t.Errorf("exit 0 with a missing kubeconfig")
	}
}
