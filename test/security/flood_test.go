package security

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/bench"
	"github.com/configstamp/configstamp/test/internal/deployments"
	"github.com/configstamp/configstamp/test/internal/reviews"
)

// The flood: floodWorkers posters, each posting again as soon as answered, reviews of
// acceptedSize: the largest a real API server sends (an UPDATE carries the object and
// the stored one, each up to etcd's 1.5 MiB, and the API server takes request bodies
// up to 3 MiB), just under the 4 MiB configstamp must accept; realCreates Deployments
// created through the API server meanwhile.
const (
	floodWorkers = 50
	acceptedSize = 4<<20 - 16<<10
	realCreates  = 10
	// runaway stops the flood early: the bound is long broken, spare the machine.
	runaway = 2 << 30
)

// floodStats are the answers to the flood.
type floodStats struct {
	posted, refused int
	codes           map[int]int
	errs            []error
	slowest         time.Duration
}

// testFlood floods the webhook port and meanwhile creates Deployments through the API
// server: configstamp's memory (VmHWM, the peak over its life, so also of the phases
// before) stays under the chart's memory limit, every forged review is answered, and
// every Deployment is stamped at its create, with the hash a create without a flood
// gets. Refusals as busy (429, 503) count as answered.
func (s *suite) testFlood(t *testing.T) {
	ref := consumer(realNS, "reference", []string{"cfg"}, nil)
	create(t, ref, client.DryRunAll)
	want := deployments.Hash(ref)
	if want == "" {
		t.Fatal("a create without a flood is not stamped")
	}
	body := forged{reqNS: flooded, objNS: flooded, name: "flood", cms: []string{"cfg"}, size: acceptedSize}.body()
	st := floodStats{codes: map[int]int{}}
	pid := s.cs.PID()
	hwmBefore, err := memory(pid, "VmHWM")
	if err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	var once sync.Once
	halt := func() { once.Do(func() { close(stop) }) }
	var peak atomic.Int64
	var sampling sync.WaitGroup
	sampling.Go(func() {
		for {
			if rss, err := memory(pid, "VmRSS"); err == nil {
				peak.Store(max(peak.Load(), rss))
				if rss > runaway {
					halt()
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	var mu sync.Mutex
	var flood sync.WaitGroup
	floodStart := time.Now()
	for range floodWorkers {
		flood.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				a := reviews.Post(s.hc, s.url, body)
				mu.Lock()
				st.posted++
				st.codes[a.Code]++
				st.slowest = max(st.slowest, a.Took)
				switch {
				case a.Err != nil:
					st.errs = append(st.errs, a.Err)
				case a.Review == nil && slices.Contains(busy, a.Code):
					st.refused++
				}
				mu.Unlock()
			}
		})
	}
	// Let the flood fill the port before the first real create.
	time.Sleep(time.Second)
	var latencies []time.Duration
	creates := auditMark()
	for i := range realCreates {
		d := consumer(realNS, fmt.Sprintf("app-%d", i), []string{"cfg"}, nil)
		start := time.Now()
		err := k8s.Create(bg, d)
		latencies = append(latencies, time.Since(start).Round(time.Millisecond))
		if err != nil {
			t.Errorf("create %s during the flood: %v", d.Name, err)
		} else if got := deployments.Hash(d); got != want {
			t.Errorf("%s created during the flood: config hash %q, want %q (as without a flood)", d.Name, got, want)
		}
	}
	halt()
	flood.Wait()
	sampling.Wait()
	took := time.Since(floodStart)

	t.Logf("real creates during the flood, each bounded by the registration's timeout (%v): %v", s.timeout, latencies)
	if t.Failed() {
		failedOpen(t, creates)
	}
	t.Logf("flood of %d-byte reviews, %d posters: %d posted in %v, HTTP codes %v, %d refused as busy, slowest answer %v, %d unanswered",
		len(body), floodWorkers, st.posted, took.Round(time.Millisecond), st.codes, st.refused, st.slowest.Round(time.Millisecond), len(st.errs))
	if len(st.errs) > 0 {
		t.Errorf("%d forged reviews got no answer; first: %v", len(st.errs), st.errs[0])
	}
	hwm, err := memory(pid, "VmHWM")
	if err != nil {
		t.Fatalf("configstamp gone after the flood? %v", err)
	}
	t.Logf("configstamp's memory (GOMEMLIMIT %s): VmHWM %s before the flood, %s after; VmRSS peak sampled during it %s",
		goMemLimit, mib(hwmBefore), mib(hwm), mib(peak.Load()))
	if hwm >= memoryLimit {
		t.Errorf("configstamp's resident memory peaked at %s, over the chart's memory limit %s: a replica would be OOM-killed", mib(hwm), mib(memoryLimit))
	}
	if !s.cs.Alive() {
		t.Error("configstamp exited during the flood")
	}
}

// failedOpen logs why the API server admitted creates in realNS without configstamp's
// answer: its failed-open audit annotations.
func failedOpen(t *testing.T, mark bench.AuditMark) {
	t.Helper()
	_ = bench.ReadAudit(env.Cluster.AuditLog, mark, func(ev *bench.AuditEvent) {
		if ev.Verb != "create" || ev.ObjectRef.Namespace != realNS || ev.ObjectRef.Resource != "deployments" {
			return
		}
		for k, v := range ev.Annotations {
			if strings.HasPrefix(k, "failed-open.") {
				t.Logf("the API server admitted %s without configstamp: %.300s", ev.ObjectRef.Name, v)
			}
		}
	})
}
