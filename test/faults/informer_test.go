package faults

import (
	"fmt"
	"testing"
	"time"

	"github.com/configstamp/configstamp/test/framework"
)

// TestMissedByInformer creates a Deployment, stamped by the webhook, while the watcher's
// Deployment informer cannot list or watch (the proxy answers its lists and watches 503,
// as an API server does while it cannot serve them), then edits its ConfigMap: the edit's
// fan-out finds no dependent, since the informer has not seen the Deployment. When the
// informer lists again, the Deployment arrives as a new object; its CREATE check must find
// the stamp stale and roll it, once. (Checking only unstamped CREATEs lost this change.)
func TestMissedByInformer(t *testing.T) {
	fp := framework.NewFaultProxy(t, env.Cluster)
	c := start(t, framework.Options{Kubeconfig: fp.Kubeconfig})
	f := newFleet(t, "created after", 0)
	fp.StartFaultsFor(framework.DeploymentLists, 503)
	t.Cleanup(func() { fp.StopFaults() })
	f.names = []string{"app-00"}
	if err := env.Client.Create(bg, deployment(f.ns, f.names[0])); err != nil {
		t.Fatal(err)
	}
	rolledOut(t, []*fleet{f}, 1, wants(t, []*fleet{f}))

	began := time.Now()
	f.edit(t, "2")
	inDebounce(t, c, 1)
	framework.Eventually(t, 30*time.Second, "the edit's fan-out over", func() error {
		if n := c.metric(t, `configstamp_debounce_pending{source="configmap"}`); n != 0 {
			return fmt.Errorf("%v ConfigMaps pending", n)
		}
		return nil
	})
	time.Sleep(2 * time.Second) // the fan-out's lookup, done by now
	if n := c.nudges(t); n != 0 {
		t.Fatalf("%d nudges while the informer could not list: the fault did not hide the Deployment", n)
	}
	phases := fp.StopFaults()
	for _, p := range phases {
		t.Logf("Deployment lists and watches faulted: %s", p.Summary())
	}
	exactlyOnce(t, []*fleet{f}, 2, began, "the informer could list again", c)
}
