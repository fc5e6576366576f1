// Package deploy tests the Helm chart: rendered objects (registration, RBAC, security
// context, PDB, certificates) and, against a real API server with cert-manager's CRDs,
// that the chart installs with the real helm and that configstamp works under the
// chart's ServiceAccount and nothing more.
package deploy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

var (
	env   *framework.Env
	chart = filepath.Join(cluster.RepoRoot(), "deploy", "helm", "configstamp")
)

func TestMain(m *testing.M) {
	// helm comes with the end-to-end tool set.
	bins, err := cluster.BinDir(true)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(framework.Main(m, cluster.Options{BinDir: bins}, func(_ context.Context, e *framework.Env) (func(bool), error) {
		env = e
		return func(bool) {}, nil
	}))
}

// tool runs helm or kubectl against the test cluster as admin.
func tool(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := toolErr(name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func toolErr(name string, args ...string) (string, error) {
	out, err := env.Command("", nil, name, args...).CombinedOutput()
	return string(out), err
}
