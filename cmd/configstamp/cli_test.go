package main

import (
	"bytes"
	"encoding/base64"
	"os"
	"strings"
	"testing"

	"github.com/configstamp/configstamp/internal/hashkey"
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
		"cj/a": workload.CronJob, "cronjobs.batch/a": workload.CronJob, "job/a": workload.Job,
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
	want := `unsupported kind "pod": want deployment, statefulset, daemonset, cronjob, job or rollout`
	if _, _, err := parseWorkload([]string{"pod/a"}); err == nil || err.Error() != want {
		t.Errorf("pod/a: %v, want %s", err, want)
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

func TestDispatchUsability(t *testing.T) {
	for _, args := range [][]string{{"configstamp", "help"}, {"configstamp", "completion", "bash"}, {`C:\bin\kubectl-configstamp.EXE`, "explain"}} {
		if !isCLI(args) {
			t.Errorf("isCLI(%q) = false", args)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"expalin", "deploy/x"}, "unexpected arguments"},
		{[]string{"-n", "x", "explain", "deploy/x"}, "configstamp explain [flags]"},
	} {
		var errOut bytes.Buffer
		if checkServerFlags(tc.args, &errOut) || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%q: stderr %q, want %q", tc.args, errOut.String(), tc.want)
		}
	}
	var errOut bytes.Buffer
	if !checkServerFlags([]string{"--webhook-port=9443", "--kubeconfig", "/k", "--zap-log-level=debug", "--hash-key", "cs/key"}, &errOut) || errOut.Len() > 0 {
		t.Errorf("valid server flags refused: %q", errOut.String())
	}
}

// Shell completion runs cobra's hidden __complete (and __completeNoDesc) as the first
// argument: they are the command-line tool's, not the server's, under either name.
// kubectl completes a plugin's arguments by running kubectl_complete-configstamp with
// them alone.
func TestCompletion(t *testing.T) {
	for _, args := range [][]string{
		{"configstamp", "__complete", "explain", ""},
		{"configstamp", "__completeNoDesc", "explain", ""},
		{"/usr/bin/kubectl-configstamp", "__complete", "explain", ""},
		{"/usr/bin/kubectl_complete-configstamp", "explain", ""},
	} {
		if !isCLI(args) {
			t.Errorf("isCLI(%q) = false", args)
		}
	}
	if got := cliArgs([]string{"/usr/bin/kubectl_complete-configstamp", "explain", "d"}); strings.Join(got, " ") != "__complete explain d" {
		t.Errorf("as the plugin's completion: args %q", got)
	}
	if got := cliArgs([]string{"configstamp", "explain", "d"}); strings.Join(got, " ") != "explain d" {
		t.Errorf("args %q", got)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"__complete", ""}, "explain\t"},
		{[]string{"__completeNoDesc", ""}, "explain\nhalt\nhash\nhelp\nimpact\nresume\n"},
		{[]string{"__complete", "explain", "d"}, "deployment/\ndaemonset/\n:6\n"},
		{[]string{"__complete", "impact", ""}, "configmap/\nsecret/\nsecretproviderclass/\n:6\n"},
		{[]string{"__complete", "explain", "deploy/x", ""}, ":4\n"},
		{[]string{"__complete", "explain", "--kube"}, "--kubeconfig\t"},
	} {
		var out, errOut bytes.Buffer
		if code := runCLI(false, tc.args, &out, &errOut); code != 0 || !strings.Contains(out.String(), tc.want) {
			t.Errorf("%q: exit %d, stdout %q (want %q), stderr %q", tc.args, code, out.String(), tc.want, errOut.String())
		}
		// The same as the plugin.
		out.Reset()
		if code := runCLI(true, tc.args, &out, &errOut); code != 0 || !strings.Contains(out.String(), tc.want) {
			t.Errorf("plugin %q: exit %d, stdout %q (want %q), stderr %q", tc.args, code, out.String(), tc.want, errOut.String())
		}
	}
	// The plugin writes no completion script: cobra's would be kubectl's (the command's
	// first word) and replace kubectl's own completion.
	var out, errOut bytes.Buffer
	if code := runCLI(true, []string{"completion", "bash"}, &out, &errOut); code == 0 || out.Len() > 0 || !strings.Contains(errOut.String(), "kubectl_complete-configstamp") {
		t.Errorf("plugin completion bash: exit %d, stdout %.200q, stderr %q", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := runCLI(false, []string{"completion", "bash"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "-F __start_configstamp configstamp") {
		t.Errorf("completion bash: exit %d, stdout %.200q", code, out.String())
	}
}

// -o is checked before anything is read: with a kubeconfig that does not exist, the
// error is about -o.
func TestOutputCheckedFirst(t *testing.T) {
	for _, args := range [][]string{
		{"explain", "deploy/a", "-o", "xml", "--kubeconfig", "/nonexistent"},
		{"impact", "cm/a", "-o", "xml", "--kubeconfig", "/nonexistent"},
		{"hash", "-f", "/nonexistent", "-o", "xml"},
	} {
		var out, errOut bytes.Buffer
		if code := runCLI(false, args, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), `unknown output format "xml"`) {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut.String())
		}
	}
}

func TestKeyFileSize(t *testing.T) {
	dir := t.TempDir()
	manifest := dir + "/m.yaml"
	if err := os.WriteFile(manifest, []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\nspec: {template: {spec: {containers: [{name: c}]}}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		content []byte
		ok      bool
	}{
		"raw":             {bytes.Repeat([]byte{1}, hashkey.Size), true},
		"raw, newline":    {append(bytes.Repeat([]byte{1}, hashkey.Size), '\n'), true},
		"base64, newline": {[]byte(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, hashkey.Size)) + "\n"), true},
		"short":           {[]byte("secret\n"), false},
		"long":            {bytes.Repeat([]byte{1}, 2*hashkey.Size), false},
	} {
		f := dir + "/key"
		if err := os.WriteFile(f, tc.content, 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		code := runCLI(false, []string{"hash", "-f", manifest, "--key-file", f, "-n", "x"}, &out, &errOut)
		if (code == 0) != tc.ok || !tc.ok && !strings.Contains(errOut.String(), "want the server's key") {
			t.Errorf("%s: exit %d, stderr %q", name, code, errOut.String())
		}
	}
}

func TestHashSkipped(t *testing.T) {
	f := t.TempDir() + "/m.yaml"
	if err := os.WriteFile(f, []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a, namespace: x, annotations: {configstamp.io/skip: \"true\"}}\n"+
		"spec: {template: {spec: {containers: [{name: c, envFrom: [{configMapRef: {name: cfg}}]}]}}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key := t.TempDir() + "/key"
	if err := os.WriteFile(key, bytes.Repeat([]byte{1}, hashkey.Size), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := runCLI(false, []string{"hash", "-f", f, "--key-file", key}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "skipped") || strings.Contains(out.String(), "config-hash") {
		t.Errorf("exit %d, out %q, stderr %q", code, out.String(), errOut.String())
	}
	// Without the key nothing can be digested: a clear error, pointing at explain.
	out.Reset()
	errOut.Reset()
	if code := runCLI(false, []string{"hash", "-f", f}, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), "--key-file is required") ||
		!strings.Contains(errOut.String(), "configstamp explain") {
		t.Errorf("without a key: exit %d, stderr %q", code, errOut.String())
	}
}

// hash -f takes the namespace of the kubeconfig's context without a cluster, and warns
// when a digest is keyed with a defaulted namespace (the deprecated
// --secret-hash-key-file still works, and turns Secrets on).
func TestHashNamespace(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := dir + "/config"
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts: [{name: c, context: {cluster: k, user: u, namespace: shop}}]\n"+
		"clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := dir + "/m.yaml"
	if err := os.WriteFile(f, []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\n"+
		"spec: {template: {spec: {containers: [{name: c, envFrom: [{secretRef: {name: s}}]}]}}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key := dir + "/key"
	if err := os.WriteFile(key, bytes.Repeat([]byte{1}, hashkey.Size), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := runCLI(false, []string{"hash", "-f", f, "--kubeconfig", kubeconfig, "--key-file", key, "--secrets"}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "in namespace shop") || strings.Contains(errOut.String(), "warning") {
		t.Errorf("context namespace: exit %d, out %q, stderr %q", code, out.String(), errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := runCLI(false, []string{"hash", "-f", f, "--kubeconfig", dir + "/none", "--secret-hash-key-file", key}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "in namespace default") || !strings.Contains(errOut.String(), "pass -n NAMESPACE") {
		t.Errorf("defaulted: exit %d, out %q, stderr %q", code, out.String(), errOut.String())
	}
}
