// Package cli tests configstamp's command-line tools (explain, impact, hash) against a
// real kube-apiserver and etcd: the configstamp server stamps the workloads, as in a
// cluster, and the built binary runs as a user runs it, also as the kubectl plugin.
// Outputs are compared with golden files under testdata (go test -update rewrites them).
package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

var (
	env    *framework.Env
	k8s    client.Client
	update = flag.Bool("update", false, "rewrite the golden files under testdata")
	bg     = context.Background()
)

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, cluster.Options{}, func(_ context.Context, e *framework.Env) (func(bool), error) {
		env, k8s = e, e.Client
		return func(bool) {}, nil
	}))
}

// result is one run of the binary.
type result struct {
	stdout, stderr string
	code           int
}

// run runs the configstamp binary (as name: the plain binary, or a path to the plugin's
// symlink) with args against the cluster as admin, unless args name a kubeconfig.
func run(t *testing.T, name string, args ...string) result {
	t.Helper()
	if !has(args, "--kubeconfig") {
		args = append(args, "--kubeconfig", env.Cluster.Kubeconfig)
	}
	// The admin may read the hash key: explain computes digests itself (the server is
	// stopped, so the webhook's dry-run could not). A test passes --hash-key "" to go without.
	if len(args) > 0 && args[0] == "explain" && !has(args, "--hash-key") {
		args = append(args, "--hash-key", keyRef)
	}
	if name == "" {
		name = env.Binary
	}
	return runCmd(t, exec.Command(name, args...))
}

func runCmd(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	code := 0
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", cmd.Args, err)
	}
	return result{stdout: out.String(), stderr: errOut.String(), code: code}
}

func has(args []string, s string) bool {
	for _, a := range args {
		if a == s {
			return true
		}
	}
	return false
}

// ok runs the binary and fails the test unless it exits 0.
func ok(t *testing.T, args ...string) string {
	t.Helper()
	r := run(t, "", args...)
	if r.code != 0 {
		t.Fatalf("configstamp %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

var (
	rfc3339   = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
	hex64     = regexp.MustCompile(`\b[0-9a-f]{64}\b`)
	hex12     = regexp.MustCompile(`\b[0-9a-f]{12}\b`)
	jsonCount = regexp.MustCompile(`,\n\s*"count": \d+`)
)

// mask replaces volatile values with names: each of known (real values: the stamp, its
// digests) by its name, so a golden file shows which value is which; then times, and any
// other hash by the order it first appears (<hash1>, <digest1>, ...), so two equal values
// still read equal.
func mask(s string, known map[string]string) string {
	keys := make([]string, 0, len(known))
	for k := range known {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return len(keys[i]) > len(keys[j]) || len(keys[i]) == len(keys[j]) && keys[i] < keys[j]
	})
	for _, k := range keys {
		if k != "" {
			s = strings.ReplaceAll(s, k, known[k])
		}
	}
	s = rfc3339.ReplaceAllString(s, "<time>")
	s = jsonCount.ReplaceAllString(s, "")
	for _, re := range []struct {
		re   *regexp.Regexp
		name string
	}{{hex64, "hash"}, {hex12, "digest"}} {
		seen := map[string]string{}
		s = re.re.ReplaceAllStringFunc(s, func(m string) string {
			if _, ok := seen[m]; !ok {
				seen[m] = "<" + re.name + string(rune('0'+len(seen)+1)) + ">"
			}
			return seen[m]
		})
	}
	return s
}

// golden compares got with testdata/name (rewritten with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the golden file (run with -update to accept):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
