package faults

import (
	"testing"
	"time"

	"github.com/configstamp/configstamp/test/framework"
)

// TestAPIServerRestart restarts kube-apiserver (same port, same etcd) inside the
// debounce window of a change, and again in the middle of the fan-out of another:
// configstamp's watches break, its checks fail, and it must finish the work once the
// API server is back, without losing a change or rolling anything twice.
func TestAPIServerRestart(t *testing.T) {
	t.Run("in the debounce window", func(t *testing.T) {
		fleets := twoWays(t, 3, func() { start(t, framework.Options{Args: []string{"--debounce", "3s"}}) })
		editAll(t, fleets, "2")
		restartAPIServer(t)
		exactlyOnce(t, fleets, 2, restarted, "the API server was ready again")
	})
	t.Run("in a fan-out", func(t *testing.T) {
		fleets := twoWays(t, 25, func() { start(t, framework.Options{}) })
		editAll(t, fleets, "2")
		done := fanOutStarted(t, fleets)
		restartAPIServer(t)
		t.Logf("the restart began with %d of %d Deployments stamped", done, total(fleets))
		exactlyOnce(t, fleets, 2, restarted, "the API server was ready again")
	})
}

// restarted is when the last restartAPIServer found the API server ready again.
var restarted time.Time

func restartAPIServer(t *testing.T) {
	t.Helper()
	began := time.Now()
	if err := env.Cluster.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	if err := env.Cluster.StartAPIServer(bg); err != nil {
		t.Fatal(err)
	}
	restarted = time.Now()
	t.Logf("kube-apiserver stopped in %.1fs, ready again %.1fs later", stopped.Sub(began).Seconds(), restarted.Sub(stopped).Seconds())
}
