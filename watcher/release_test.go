package watcher

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/workload"
)

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
