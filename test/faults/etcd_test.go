package faults

import (
	"testing"
	"time"

	"github.com/configstamp/configstamp/test/framework"
)

// pause is how long etcd stays stopped.
const pause = 10 * time.Second

// TestEtcdPaused stops etcd (SIGSTOP) for ten seconds in the middle of a fan-out: the
// API server's writes and quorum reads hang, then go on.
func TestEtcdPaused(t *testing.T) {
	fleets := twoWays(t, 25, func() { start(t, framework.Options{}) })
	editAll(t, fleets, "2")
	done := fanOutStarted(t, fleets)
	if err := env.Cluster.Pause("etcd"); err != nil {
		t.Fatal(err)
	}
	t.Logf("etcd paused with %d of %d Deployments stamped", done, total(fleets))
	time.Sleep(pause)
	if err := env.Cluster.Resume("etcd"); err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, fleets, 2, time.Now(), "etcd resumed")
}
