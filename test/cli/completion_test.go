package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompletion: shell completion runs the built binary with cobra's hidden __complete
// (or __completeNoDesc) first; it prints the completions and exits 0 rather than
// reaching the server's flags. kubectl completes the plugin's arguments by running
// kubectl_complete-configstamp with them alone.
func TestCompletion(t *testing.T) {
	const kinds = "deployment/\nstatefulset/\ndaemonset/\ncronjob/\njob/\nrollout/\n:6\n"
	dir := t.TempDir()
	for _, name := range []string{"kubectl-configstamp", "kubectl_complete-configstamp"} {
		if err := os.Symlink(env.Binary, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{env.Binary, []string{"__complete", "explain", ""}, kinds},
		{env.Binary, []string{"__completeNoDesc", "impact", ""}, "configmap/\nsecret/\nsecretproviderclass/\n:6\n"},
		{env.Binary, []string{"__completeNoDesc", ""}, "completion\nexplain\nhalt\nhash\nhelp\nimpact\nresume\n:4\n"},
		{filepath.Join(dir, "kubectl-configstamp"), []string{"__complete", "explain", ""}, kinds},
		{filepath.Join(dir, "kubectl_complete-configstamp"), []string{"explain", ""}, kinds},
	} {
		if r := runCmd(t, exec.Command(tc.name, tc.args...)); r.code != 0 || r.stdout != tc.want {
			t.Errorf("%s %q: exit %d, stdout %q, want %q; stderr %q", filepath.Base(tc.name), tc.args, r.code, r.stdout, tc.want, r.stderr)
		}
	}
	// Under the plugin's name, no script: cobra's would be kubectl's.
	if r := runCmd(t, exec.Command(filepath.Join(dir, "kubectl-configstamp"), "completion", "bash")); r.code == 0 || r.stdout != "" ||
		!strings.Contains(r.stderr, "kubectl_complete-configstamp") {
		t.Errorf("kubectl-configstamp completion bash: exit %d, stdout %.200q, stderr %q", r.code, r.stdout, r.stderr)
	}
	kubectl, err := lookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl not on PATH: %v", err)
	}
	cmd := env.Command(dir, []string{"PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH")}, "kubectl",
		"__complete", "configstamp", "explain", "")
	cmd.Path = kubectl
	if r := runCmd(t, cmd); r.code != 0 || r.stdout != kinds {
		t.Errorf("kubectl __complete configstamp explain: exit %d, stdout %q, want %q; stderr %q", r.code, r.stdout, kinds, r.stderr)
	}
}
