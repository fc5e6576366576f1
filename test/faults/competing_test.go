package faults

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/framework"
)

// TestCompetingWriter runs another controller that sets spec.replicas of every
// Deployment while configstamp works.
//
// Through the scale subresource, as an autoscaler does, the webhook is not called for
// its writes: only configstamp's nudges can stamp. It scales the installed-over fleet
// once a second while configstamp adopts it (its record writes carry the
// resourceVersion they were decided on: a conflict must be retried, no record lost; at
// ten writes a second, with the Deployment controller's status writes after each,
// nearly every record write conflicted and half the fleet was still unrecorded after
// two minutes), and both fleets ten times a second while a change fans out: every
// nudge must land, one per Deployment (configstamp_nudges_total and its log), each
// stamped with the new hash and rolled exactly once.
//
// Through the Deployment itself (a merge patch), the webhook is called for each of its
// writes and must leave the stamp as stored (the change is the watcher's to roll, after
// the debounce): two edits of the ConfigMaps half a second apart, inside the debounce,
// still make one nudge and one rollout per Deployment.
func TestCompetingWriter(t *testing.T) {
	t.Run("scale subresource", func(t *testing.T) {
		var c *cs
		var adoption func() int64
		before := installOver(t, 10, func(before *fleet) {
			adoption = compete(t, []*fleet{before}, viaScale, time.Second)
			c = start(t, framework.Options{})
		})
		writes := adoption()
		t.Logf("the other controller scaled %d times during the adoption; configstamp's record writes met %d conflicts",
			writes, strings.Count(c.Output(), "the object has been modified"))
		fleets := createAfter(t, before, 10)
		competeThroughChange(t, c, fleets, viaScale, "2")
	})
	t.Run("through the Deployment", func(t *testing.T) {
		var c *cs
		fleets := twoWays(t, 10, func() { c = start(t, framework.Options{}) })
		competeThroughChange(t, c, fleets, viaDeployment, "2", "3")
	})
}

// competeThroughChange runs the other controller (through via) on every Deployment of
// the fleets while the fleets' ConfigMaps are edited to each of values in turn, half a
// second apart (inside the debounce), and checks that every Deployment was nudged once
// and rolled once, to the last value.
func competeThroughChange(t *testing.T, c *cs, fleets []*fleet, via scaler, values ...string) {
	t.Helper()
	n := total(fleets)
	nudged, lines := c.nudges(t), c.nudgedLines()
	if len(lines) != 0 {
		t.Fatalf("nudges before the change: %v", lines)
	}
	stop := compete(t, fleets, via, 100*time.Millisecond)
	for i, v := range values {
		if i > 0 {
			time.Sleep(500 * time.Millisecond)
		}
		editAll(t, fleets, v)
	}
	began := time.Now()
	want := wants(t, fleets)
	framework.Eventually(t, 3*time.Minute, "every Deployment stamped under competition", func() error {
		for _, f := range fleets {
			if _, err := f.stamped(want[f]); err != nil {
				return err
			}
		}
		return nil
	})
	t.Logf("all stamped %.1fs after the edit, under competition", time.Since(began).Seconds())
	// A few seconds more of competition: a late second nudge would roll now.
	time.Sleep(3 * time.Second)
	writes := stop()
	t.Logf("the other controller wrote spec.replicas %d times", writes)
	exactlyOnce(t, fleets, 2, began, "the edit", c)
	if got := c.nudges(t) - nudged; got != n {
		t.Errorf("configstamp_nudges_total rose by %d for %d Deployments, want one each", got, n)
	}
	lines = c.nudgedLines()
	for _, f := range fleets {
		for _, name := range f.names {
			if got := lines[f.ns+"/"+name]; got != 1 {
				t.Errorf("%s/%s (%s): %d \"Nudged Deployment\" log lines, want 1", f.ns, name, f.mode, got)
			}
		}
	}
}

// scaler sets spec.replicas of one Deployment.
type scaler func(ctx context.Context, ns, name string, replicas int) error

var clientset = sync.OnceValue(func() *kubernetes.Clientset { return kubernetes.NewForConfigOrDie(env.Cluster.Config) })

// viaScale writes the scale subresource, as an autoscaler does (no admission webhook is
// called for it).
func viaScale(ctx context.Context, ns, name string, replicas int) error {
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	_, err := clientset().AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "scale")
	return err
}

// viaDeployment merge-patches the Deployment itself (the webhook is called).
func viaDeployment(ctx context.Context, ns, name string, replicas int) error {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	return env.Client.Patch(ctx, d, client.RawPatch(types.MergePatchType, []byte(patch)))
}

// compete sets spec.replicas of every Deployment of the fleets (through via) between 1
// and 2, every period, until the returned stop is called, which leaves them at 1 and
// returns how many writes it made.
func compete(t *testing.T, fleets []*fleet, via scaler, period time.Duration) (stop func() int64) {
	ctx, cancel := context.WithCancel(bg)
	var writes atomic.Int64
	var wg sync.WaitGroup
	round := func(ctx context.Context, replicas int) {
		var rw sync.WaitGroup
		for _, f := range fleets {
			for _, name := range f.names {
				rw.Add(1)
				go func() {
					defer rw.Done()
					if via(ctx, f.ns, name, replicas) == nil {
						writes.Add(1)
					}
				}()
			}
		}
		rw.Wait()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(period)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				round(ctx, 1+i%2)
			}
		}
	}()
	var once sync.Once
	stop = func() int64 {
		once.Do(func() {
			cancel()
			wg.Wait()
			round(bg, 1)
		})
		return writes.Load()
	}
	t.Cleanup(func() { stop() })
	return stop
}
