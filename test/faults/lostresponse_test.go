package faults

import (
	"fmt"
	"testing"
	"time"

	"github.com/configstamp/configstamp/test/framework"
)

// TestLostResponses loses the API server's answers to configstamp's nudges during a
// fan-out: a proxy forwards each PATCH of a Deployment, the API server applies it (the
// webhook stamps it, the Deployment rolls), and the proxy answers 503 in its place, as a
// connection cut after the write would. configstamp sees every nudge fail and retries;
// the retry must find the Deployment current and leave it alone: one rollout each.
func TestLostResponses(t *testing.T) {
	fp := framework.NewFaultProxy(t, env.Cluster)
	var c *cs
	fleets := twoWays(t, 10, func() { c = start(t, framework.Options{Kubeconfig: fp.Kubeconfig}) })
	n := total(fleets)
	fp.LoseResponses(framework.DeploymentPatch)
	t.Cleanup(func() { fp.StopLosing() })
	editAll(t, fleets, "2")
	began := time.Now()
	want := wants(t, fleets)
	framework.Eventually(t, 2*time.Minute, "every Deployment stamped by a nudge whose answer was lost", func() error {
		done := 0
		for _, f := range fleets {
			k, _ := f.stamped(want[f])
			done += k
		}
		if done < n {
			return fmt.Errorf("%d of %d stamped", done, n)
		}
		return nil
	})
	time.Sleep(time.Second) // the last answers on their way
	lost := fp.StopLosing()
	nudged := c.nudges(t)
	byCode := map[int]int{}
	for _, l := range lost {
		byCode[l.Code]++
	}
	t.Logf("all %d stamped %.1fs after the edit; %d PATCH answers lost (API server's codes: %v); configstamp_nudges_total %d",
		n, time.Since(began).Seconds(), len(lost), byCode, nudged)
	if byCode[200] < n {
		t.Fatalf("%d applied PATCHes answered with 503, want at least %d (one nudge per Deployment)", byCode[200], n)
	}
	if nudged != 0 {
		t.Fatalf("configstamp_nudges_total %d with every answer lost", nudged)
	}
	exactlyOnce(t, fleets, 2, began, "the edit", c)
	t.Logf("after the retries: configstamp_nudges_total %d (a retry that found its Deployment current sends nothing)", c.nudges(t))
}
