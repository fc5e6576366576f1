package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/configstamp/configstamp/stamp"
)

var bg = context.Background()

// settle is how long a count of ReplicaSets must hold after a rollout completed: past
// the watcher's debounce (2s) and its check, so an unwanted second rollout would show.
const settle = 6 * time.Second

// tool runs helm, helmfile or kubectl as a user would, against the test cluster.
func tool(t *testing.T, dir string, extraEnv []string, name string, args ...string) string {
	t.Helper()
	out, err := env.Command(dir, extraEnv, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// copyTestdata copies testdata into a fresh directory the test may edit.
func copyTestdata(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS("testdata")); err != nil {
		t.Fatal(err)
	}
	return dst
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func deployment(t *testing.T, ns, name string) *appsv1.Deployment { return env.Deployment(t, ns, name) }

func replicaSets(t *testing.T, d *appsv1.Deployment) []appsv1.ReplicaSet {
	return env.ReplicaSets(t, d)
}

func rolledOut(t *testing.T, ns, name string) *appsv1.Deployment { return env.RolledOut(t, ns, name) }

func expectReplicaSets(t *testing.T, ns, name string, n int) *appsv1.Deployment {
	return env.ExpectReplicaSets(t, ns, name, n, settle)
}

func hashOf(d *appsv1.Deployment) string { return d.Spec.Template.Annotations[stamp.HashAnnotation] }

func sourcesOf(d *appsv1.Deployment) map[string]string {
	m := map[string]string{}
	for _, e := range strings.Split(d.Spec.Template.Annotations[stamp.SourcesAnnotation], ",") {
		if k, v, ok := strings.Cut(e, "="); ok {
			m[k] = v
		}
	}
	return m
}
