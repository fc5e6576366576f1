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
		var c *cs
		// The debounce outlasts the slowest stop (Terminate's 5 s grace, then a kill):
		// with 3 s, a kube-apiserver slow to stop on a loaded machine let the first
		// nudges through before it was down, and the test's own guard failed it.
		fleets := twoWays(t, 3, func() { c = start(t, framework.Options{Args: []string{"--debounce", "10s"}}) })
		from := c.tally(t)
		editAll(t, fleets, "2")
		inDebounce(t, c, len(fleets))
		stopAPIServer(t)
		if n := c.nudges(t); n != 0 {
			t.Fatalf("%d nudges before the API server was down: the fault missed the debounce window", n)
		}
		startAPIServer(t)
		exactlyOnce(t, fleets, 2, restarted, "the API server was ready again", c)
		nudgedOnceEachOrUnread(t, c, fleets, from)
	})
	t.Run("in a fan-out", func(t *testing.T) {
		var c *cs
		fleets := twoWays(t, 25, func() { c = start(t, framework.Options{}) })
		from := c.tally(t)
		editAll(t, fleets, "2")
		fanOutStarted(t, c)
		stopAPIServer(t)
		at := c.nudges(t) // none can land while it is down
		midFanOut(t, "the API server stopped", at, total(fleets))
		startAPIServer(t)
		exactlyOnce(t, fleets, 2, restarted, "the API server was ready again", c)
		nudgedAfter(t, "the restart", c.nudges(t)-at)
		nudgedOnceEachOrUnread(t, c, fleets, from)
	})
}

// restarted is when the last startAPIServer found the API server ready again.
var restarted time.Time

// stopAPIServer stops kube-apiserver; the test's cleanup starts it again if the test
// ends before startAPIServer did (the next scenarios need it).
func stopAPIServer(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		if !env.Cluster.APIServerRunning() {
			if err := env.Cluster.StartAPIServer(bg); err != nil {
				t.Errorf("start the API server again: %v", err)
			}
		}
	})
	began := time.Now()
	if err := env.Cluster.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver stopped in %.1fs", time.Since(began).Seconds())
}

func startAPIServer(t *testing.T) {
	t.Helper()
	began := time.Now()
	if err := env.Cluster.StartAPIServer(bg); err != nil {
		t.Fatal(err)
	}
	restarted = time.Now()
	t.Logf("kube-apiserver ready again %.1fs later", restarted.Sub(began).Seconds())
}
