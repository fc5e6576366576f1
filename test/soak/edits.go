package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// editor makes random ConfigMap edits, each to a ConfigMap not edited within the
// cooldown: every edit is then one rollout of its Deployment.
type editor struct {
	cs       kubernetes.Interface
	objs     []object
	cooldown time.Duration

	eligible []int    // objects whose ConfigMap may be edited now
	recent   []recent // edited within the cooldown, oldest first

	mu     sync.Mutex
	edits  []int // per object, edits that succeeded
	failed int   // edits that failed after retries
}

type recent struct {
	i  int
	at time.Time
}

// editing is what the editor did.
type editing struct {
	made, failed, skipped int // skipped: ticks with no ConfigMap out of its cooldown
	took                  time.Duration
}

func newEditor(cs kubernetes.Interface, objs []object, cooldown time.Duration) *editor {
	e := &editor{cs: cs, objs: objs, cooldown: cooldown, edits: make([]int, len(objs))}
	for i := range objs {
		e.eligible = append(e.eligible, i)
	}
	return e
}

// run edits at rate per second for d. An edit that takes long does not hold up the
// next (a few run at once), so the rate holds while the API server is busy.
func (e *editor) run(ctx context.Context, rate float64, d time.Duration) editing {
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	start := time.Now()
	end := start.Add(d)
	slots := make(chan struct{}, 8)
	var wg sync.WaitGroup
	var out editing
	for now := range tick.C {
		if now.After(end) {
			break
		}
		for len(e.recent) > 0 && now.Sub(e.recent[0].at) >= e.cooldown {
			e.eligible = append(e.eligible, e.recent[0].i)
			e.recent = e.recent[1:]
		}
		if len(e.eligible) == 0 {
			out.skipped++
			continue
		}
		k := rand.IntN(len(e.eligible))
		i := e.eligible[k]
		e.eligible[k] = e.eligible[len(e.eligible)-1]
		e.eligible = e.eligible[:len(e.eligible)-1]
		e.recent = append(e.recent, recent{i: i, at: now})
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			e.edit(ctx, i)
		}()
	}
	wg.Wait()
	out.took = time.Since(start)
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, n := range e.edits {
		out.made += n
	}
	out.failed = e.failed
	return out
}

// edit sets the ConfigMap's revision to one more than the edits made so far (retried:
// a write that landed but timed out lands again as a no-op).
func (e *editor) edit(ctx context.Context, i int) {
	o := e.objs[i]
	e.mu.Lock()
	next := e.edits[i] + 1
	e.mu.Unlock()
	patch := []byte(fmt.Sprintf(`{"data":{%q:"%d"}}`, revisionKey, next))
	var err error
	for try := 0; try < 3; try++ {
		if _, err = e.cs.CoreV1().ConfigMaps(o.namespace).Patch(ctx, o.configMap, types.MergePatchType, patch, metav1.PatchOptions{}); err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.failed++
		fmt.Printf("  edit of %s/%s failed: %v\n", o.namespace, o.configMap, err)
		return
	}
	e.edits[i] = next
}

// tally is the edits that succeeded, per object.
func (e *editor) tally() []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]int(nil), e.edits...)
}
