package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
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

func deployment(t *testing.T, ns, name string) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	if err := env.Client.Get(bg, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
		t.Fatalf("get deployment %s/%s: %v", ns, name, err)
	}
	return &d
}

// replicaSets returns the Deployment's ReplicaSets, oldest first.
func replicaSets(t *testing.T, d *appsv1.Deployment) []appsv1.ReplicaSet {
	t.Helper()
	var list appsv1.ReplicaSetList
	if err := env.Client.List(bg, &list, client.InNamespace(d.Namespace)); err != nil {
		t.Fatal(err)
	}
	var out []appsv1.ReplicaSet
	for _, rs := range list.Items {
		if owner := metav1.GetControllerOf(&rs); owner != nil && owner.UID == d.UID {
			out = append(out, rs)
		}
	}
	revision := func(rs *appsv1.ReplicaSet) int {
		n, _ := strconv.Atoi(rs.Annotations["deployment.kubernetes.io/revision"])
		return n
	}
	sort.Slice(out, func(i, j int) bool { return revision(&out[i]) < revision(&out[j]) })
	return out
}

// rolledOut waits until the Deployment's rollout is complete: every replica updated and
// available, old ReplicaSets scaled down, and every pod of the newest ReplicaSet Running
// with the Deployment's config hash. It returns the Deployment.
func rolledOut(t *testing.T, ns, name string) *appsv1.Deployment {
	t.Helper()
	var d *appsv1.Deployment
	framework.Eventually(t, 2*time.Minute, "rollout of "+name, func() error {
		d = deployment(t, ns, name)
		want := *d.Spec.Replicas
		st := d.Status
		if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != want || st.AvailableReplicas != want || st.Replicas != want {
			return fmt.Errorf("generation %d observed %d, replicas %d updated %d available %d",
				d.Generation, st.ObservedGeneration, st.Replicas, st.UpdatedReplicas, st.AvailableReplicas)
		}
		var pods corev1.PodList
		if err := env.Client.List(bg, &pods, client.InNamespace(ns), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
			return err
		}
		running := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				return fmt.Errorf("pod %s still terminating", p.Name)
			}
			if got := p.Annotations[stamp.HashAnnotation]; got != d.Spec.Template.Annotations[stamp.HashAnnotation] {
				return fmt.Errorf("pod %s carries hash %q, Deployment %q", p.Name, got, d.Spec.Template.Annotations[stamp.HashAnnotation])
			}
			if p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("pod %s is %s", p.Name, p.Status.Phase)
			}
			running++
		}
		if running != int(want) {
			return fmt.Errorf("%d pods Running, want %d", running, want)
		}
		return nil
	})
	return d
}

// expectReplicaSets waits until the Deployment has n ReplicaSets and its rollout is
// complete, and asserts that it still has exactly n after the settle period.
func expectReplicaSets(t *testing.T, ns, name string, n int) *appsv1.Deployment {
	t.Helper()
	count := func() error {
		if got := len(replicaSets(t, deployment(t, ns, name))); got != n {
			return fmt.Errorf("%d ReplicaSets, want %d", got, n)
		}
		return nil
	}
	what := fmt.Sprintf("%s has %d ReplicaSets", name, n)
	framework.Eventually(t, time.Minute, what, count)
	rolledOut(t, ns, name)
	framework.Consistently(t, settle, what, count)
	return rolledOut(t, ns, name)
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
