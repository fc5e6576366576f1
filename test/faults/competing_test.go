package faults

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/framework"
)

// TestCompetingWriter runs another controller (an autoscaler, say) that sets
// spec.replicas of every Deployment of the fan-out ten times a second while a change
// fans out: every nudge must land (each Deployment stamped with the new hash) and each
// rolls exactly once.
func TestCompetingWriter(t *testing.T) {
	fleets := twoWays(t, 10, func() { start(t, framework.Options{}) })
	stop := compete(t, fleets)
	editAll(t, fleets, "2")
	began := time.Now()
	framework.Eventually(t, 3*time.Minute, "every Deployment stamped under competition", func() error {
		for _, f := range fleets {
			want, err := f.wantHash()
			if err != nil {
				return err
			}
			if _, err := f.stamped(want); err != nil {
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
	exactlyOnce(t, fleets, 2, began, "the edit")
}

// compete patches spec.replicas of every Deployment of the fleets between 1 and 2,
// every 100ms, until the returned stop is called, which leaves them at 1 and returns
// how many writes it made.
func compete(t *testing.T, fleets []*fleet) (stop func() int64) {
	ctx, cancel := context.WithCancel(bg)
	var writes atomic.Int64
	var wg sync.WaitGroup
	set := func(f *fleet, name string, replicas int) {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}}
		patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
		if err := env.Client.Patch(ctx, d, client.RawPatch(types.MergePatchType, []byte(patch))); err == nil {
			writes.Add(1)
		}
	}
	round := func(replicas int) {
		var rw sync.WaitGroup
		for _, f := range fleets {
			for _, name := range f.names {
				rw.Add(1)
				go func() { defer rw.Done(); set(f, name, replicas) }()
			}
		}
		rw.Wait()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				round(1 + i%2)
			}
		}
	}()
	var once sync.Once
	stop = func() int64 {
		once.Do(func() {
			cancel()
			wg.Wait()
			ctx = bg
			round(1)
		})
		return writes.Load()
	}
	t.Cleanup(func() { stop() })
	return stop
}
