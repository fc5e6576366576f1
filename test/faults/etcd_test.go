package faults

import (
	"testing"
	"time"

	"github.com/configstamp/configstamp/test/framework"
)

// pause is how long etcd stays stopped.
const pause = 10 * time.Second

// TestEtcdPaused stops etcd (SIGSTOP) for ten seconds in the middle of a fan-out: the
// API server's writes and quorum reads hang, then go on. A nudge in flight when it
// lands may reach the webhook while its config read fails: admitted unstamped, counted
// unread and retried; one more nudge, never a bypass.
func TestEtcdPaused(t *testing.T) {
	var c *cs
	fleets := twoWays(t, 25, func() { c = start(t, framework.Options{}) })
	from := c.tally(t)
	editAll(t, fleets, "2")
	fanOutStarted(t, c)
	t.Cleanup(func() { _ = env.Cluster.Resume("etcd") }) // also if the test ends early
	if err := env.Cluster.Pause("etcd"); err != nil {
		t.Fatal(err)
	}
	at := c.nudges(t) // a nudge needs an etcd write
	midFanOut(t, "etcd paused", at, total(fleets))
	time.Sleep(pause)
	if err := env.Cluster.Resume("etcd"); err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, fleets, 2, time.Now(), "etcd resumed", c)
	nudgedAfter(t, "etcd was paused", c.nudges(t)-at)
	nudgedOnceEachOrUnread(t, c, fleets, from)
}
