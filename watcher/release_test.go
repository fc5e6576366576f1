package watcher

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/workload"
)

// TestReleaserAfterBurst: the heap is released once per burst of checks, after a look
// that saw none run, never while checks run nor at rest.
func TestReleaserAfterBurst(t *testing.T) {
	var checks atomic.Uint64
	n := 0
	r := &releaser{checks: &checks, release: func() { n++ }}
	released, seen := uint64(0), uint64(0)
	look := func(added uint64, want int) {
		t.Helper()
		checks.Add(added)
		released, seen = r.tick(released, seen)
		if n != want {
			t.Fatalf("after a look with %d new checks: %d releases, want %d", added, n, want)
		}
	}
	look(0, 0)   // at rest
	look(100, 0) // checks running
	look(5, 0)   // still running
	look(0, 1)   // quiet after the burst: released
	look(0, 1)   // at rest: not again
	look(0, 1)
	look(1, 1) // a fan-out
	look(0, 2) // quiet again
}

// TestReleaserTrickle: a trickle of checks, one between every two looks, releases at
// most once per gap looks, not at every other look.
func TestReleaserTrickle(t *testing.T) {
	var checks atomic.Uint64
	n := 0
	r := &releaser{checks: &checks, gap: releaseGap, release: func() { n++ }}
	released, seen := uint64(0), uint64(0)
	for range releaseGap {
		checks.Add(1)
		released, seen = r.tick(released, seen)
		released, seen = r.tick(released, seen)
	}
	if n != 2 {
		t.Fatalf("%d releases in %d looks of a trickle, want 2 (one per %d looks)", n, 2*releaseGap, releaseGap)
	}
}

// BenchmarkReleaseAt50k: what one release costs (debug.FreeOSMemory, blocking its
// caller) with 50,000 trimmed Helm-style Deployments live, after a burst that freed
// about as much again. Reports the live heap; not run by make test.
func BenchmarkReleaseAt50k(b *testing.B) {
	const n = 50000
	cached := make([]client.Object, n)
	for i := range cached {
		d := &appsv1.Deployment{ObjectMeta: helmMeta(fmt.Sprintf("d%d", i)), Spec: appsv1.DeploymentSpec{Template: helmTemplate(),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "app", "app.kubernetes.io/instance": fmt.Sprintf("d%d", i)}}}}
		cached[i] = workload.Deployment.Trim(d, "")
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		for _, o := range cached { // a burst: every reader decodes
			_ = workload.Deployment.Template(o)
		}
		b.StartTimer()
		debug.FreeOSMemory()
	}
	runtime.KeepAlive(cached)
	b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "live-MiB")
}
