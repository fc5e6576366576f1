package integration

import (
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/deployments"
)

// TestFloodingTenantStarvesNoOne: tenant A floods the watcher: Deployments that each
// name hundreds of ConfigMaps that do not exist, every read of which the API server
// answers slowly (a proxy), so that every check of them runs into --read-timeout, one
// worker at a time (--concurrency 1). Tenant B's ConfigMap edit, made once A's checks are
// queued, still rolls B's Deployment exactly once, and before A's backlog drains: when
// B's new stamp appears, fewer than half of A's first checks have timed out (a queue
// served first come first served runs every one of them before B's).
func TestFloodingTenantStarvesNoOne(t *testing.T) {
	const flooders, missing = 12, 200
	fp := framework.NewFaultProxy(t, env.Cluster)
	metricsAddr := freeAddr(t)
	a, b := env.NewNamespace(t, true), env.NewNamespace(t, true)
	cleanUp(t, a, b)
	fp.Slow(framework.ConfigMapGetsIn(a), 200*time.Millisecond)
	// The client's own rate limit is raised so that the proxy paces the reads: each of A's
	// checks holds the worker for the whole read timeout.
	env.Start(t, framework.Options{Kubeconfig: fp.Kubeconfig, Args: []string{"--metrics-bind-address", metricsAddr,
		"--concurrency", "1", "--read-timeout", "1s", "--kube-api-qps", "1000", "--kube-api-burst", "2000"}})
	create(t, configMap(b, "cfg", map[string]string{"k": "1"}))
	d := createDeployment(t, b, "app", podWithVolumes("cfg"))

	// Each create waits out the webhook's own read timeout (admitted unstamped).
	createAll(t, a, "flood", flooders, manyMissing(missing))
	setData(t, b, "cfg", "k", "2")
	edited := time.Now()
	want := docHash(t, b, docSource{name: "cfg"})
	const timedOut = `configstamp_checks_total{result="read_timeout"}`
	var timeoutsThen float64
	framework.Eventually(t, 2*time.Minute, "B's Deployment stamped", func() error {
		if got := hashOf(getDeployment(t, b, "app")); got != want {
			return fmt.Errorf("stamp %q, want %q", got, want)
		}
		timeoutsThen = scrape(t, metricsAddr)[timedOut]
		return nil
	})
	t.Logf("B rolled %.1fs after its edit; by then %v of A's %d first checks had timed out", time.Since(edited).Seconds(), timeoutsThen, flooders)
	if timeoutsThen >= flooders/2 {
		t.Errorf("%v of A's checks timed out before B's change rolled, want fewer than %d: B waited behind A's backlog", timeoutsThen, flooders/2)
	}
	// The flood was real: A's first checks all run into the read timeout.
	framework.Eventually(t, 2*time.Minute, "A's checks timed out", func() error {
		if n := scrape(t, metricsAddr)[timedOut]; n < flooders {
			return fmt.Errorf("%v checks timed out, want at least %d", n, flooders)
		}
		return nil
	})
	if got := getDeployment(t, b, "app"); got.Generation != d.Generation+1 {
		t.Fatalf("B's Deployment: generation %d -> %d, want exactly one more", d.Generation, got.Generation)
	}
	keepsGeneration(t, settle, b, "app", d.Generation+1)
}

// TestFanOutBlocksNoOtherSource: one ConfigMap consumed by thousands of Deployments (no
// pods here) changes and, while its fan-out is checked one workload at a time
// (--concurrency 1), a ConfigMap with one consumer in another namespace changes: that one
// is nudged, exactly once, while most of the fan-out is still to come. A
// first-come-first-served queue, or a hand-off that blocks, puts it after all of it.
func TestFanOutBlocksNoOtherSource(t *testing.T) {
	const consumers = 2000
	metricsAddr := freeAddr(t)
	big, small := env.NewNamespace(t, true), env.NewNamespace(t, true)
	cleanUp(t, big, small)
	env.Start(t, framework.Options{Args: []string{"--metrics-bind-address", metricsAddr,
		"--concurrency", "1", "--kube-api-qps", "1000", "--kube-api-burst", "2000"}})
	create(t, configMap(big, "shared", map[string]string{"k": "1"}))
	create(t, configMap(small, "own", map[string]string{"k": "1"}))
	d := createDeployment(t, small, "app", podWithVolumes("own"))
	start := time.Now()
	createAll(t, big, "app", consumers, podWithVolumes("shared"))
	t.Logf("created %d consumers in %.1fs", consumers, time.Since(start).Seconds())
	// Their checks after creation are done: the queue is empty.
	const queued = `configstamp_queue_namespaces{controller="deployment"}`
	framework.Eventually(t, 2*time.Minute, "creation checks done", func() error {
		m := scrape(t, metricsAddr)
		if n, ok := m[queued]; !ok || n != 0 {
			return fmt.Errorf("%s = %v (exported: %v)", queued, n, ok)
		}
		return nil
	})

	nudged := scrape(t, metricsAddr)["configstamp_nudges_total"]
	setData(t, big, "shared", "k", "2")
	start = time.Now()
	framework.Eventually(t, time.Minute, "the fan-out begun", func() error {
		if n := scrape(t, metricsAddr)["configstamp_nudges_total"]; n <= nudged {
			return fmt.Errorf("%v nudges", n)
		}
		return nil
	})
	setData(t, small, "own", "k", "2")
	edited := time.Now()
	// Generous: with the fan-out in front of it, it rolls once the fan-out is done.
	after := deployments.WaitStamp(t, k8s, 3*time.Minute, small, "app", docHash(t, small, docSource{name: "own"}))
	took := time.Since(edited)
	// What is not nudged yet now was not when the small change rolled.
	var list appsv1.DeploymentList
	if err := k8s.List(bg, &list, client.InNamespace(big)); err != nil {
		t.Fatal(err)
	}
	want, pending := docHash(t, big, docSource{name: "shared"}), 0
	for _, dep := range list.Items {
		if hashOf(&dep) != want {
			pending++
		}
	}
	t.Logf("the small change rolled %.1fs after its edit, %.1fs after the fan-out began, with %d of its %d nudges still to come",
		took.Seconds(), time.Since(start).Seconds(), pending, consumers)
	if pending < consumers/2 {
		t.Errorf("%d of %d fan-out nudges still to come when the small change rolled, want at least half: it waited behind the fan-out", pending, consumers)
	}
	if after.Generation != d.Generation+1 {
		t.Fatalf("the small change's Deployment: generation %d -> %d, want exactly one more", d.Generation, after.Generation)
	}
	keepsGeneration(t, settle, small, "app", after.Generation)
}

// manyMissing is a pod spec whose container takes its environment from n ConfigMaps that
// do not exist (optional: the pod could start).
func manyMissing(n int) corev1.PodSpec {
	c := corev1.Container{Name: "app", Image: "registry.example/app:1"}
	for i := range n {
		c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: fmt.Sprintf("missing-%03d", i)}, Optional: ptr.To(true)}})
	}
	return corev1.PodSpec{Containers: []corev1.Container{c}}
}

// createAll creates n Deployments prefix-NNNN with spec in ns, 16 at a time.
func createAll(t *testing.T, ns, prefix string, n int, spec corev1.PodSpec) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			dep := deployment(fmt.Sprintf("%s-%04d", prefix, i), *spec.DeepCopy())
			dep.Namespace = ns
			if err := k8s.Create(bg, dep); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d creates failed, the first: %v", len(errs), errs[0])
	}
}

// cleanUp deletes the Deployments of the namespaces and opts them out when the test
// ends, so the configstamps of later tests do not check them all again.
func cleanUp(t *testing.T, namespaces ...string) {
	t.Cleanup(func() {
		for _, ns := range namespaces {
			if err := k8s.DeleteAllOf(bg, &appsv1.Deployment{}, client.InNamespace(ns)); err != nil {
				t.Logf("delete the Deployments of %s: %v", ns, err)
			}
			patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, stamp.InjectLabel)
			if err := k8s.Patch(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
				t.Logf("opt %s out: %v", ns, err)
			}
		}
	})
}
