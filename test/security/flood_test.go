package security

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/bench"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/deployments"
	"github.com/configstamp/configstamp/test/internal/reviews"
)

// The floods: floodWorkers posters, each posting again as soon as answered;
// acceptedSize is the largest review a real API server sends (an UPDATE carries the
// object and the stored one, each up to etcd's 1.5 MiB, and the API server takes
// request bodies up to 3 MiB), just under the 4 MiB configstamp must accept;
// realCreates Deployments are created through the API server meanwhile.
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

// flooding is one flood's outcome: the answers, configstamp's memory and the real
// creates made meanwhile (their stamps at create: "" when admitted unstamped).
type flooding struct {
	stats     floodStats
	took      time.Duration
	hwmBefore int64
	peak      int64
	created   []*appsv1.Deployment
	stamps    []string
	latencies []time.Duration
	mark      bench.AuditMark
}

// testFlood is the flood the issue names: floodWorkers posters, each posting again as
// soon as answered, of the forged reviews alone (outside the scope, another namespace's
// object, 1,000 sources, 5 MiB): none costs a read, so real creates through the API
// server meanwhile are each stamped at their create, with the hash a create without a
// flood gets; every forged review is answered; memory stays under the chart's limit.
func (s *suite) testFlood(t *testing.T) {
	want := s.reference(t)
	var bodies [][]byte
	for _, c := range forgedCases() {
		bodies = append(bodies, c.review.body())
	}
	f := s.flood(t, bodies, "forged")
	for i, d := range f.created {
		if f.stamps[i] != want {
			t.Errorf("%s created during the flood: config hash %q, want %q (as without a flood)", d.Name, f.stamps[i], want)
		}
	}
	if t.Failed() {
		failedOpen(t, f.mark)
	}
	s.floodBounded(t, f)
}

// testUnknownNamespaceFlood: floodWorkers posters re-posting reviews that name
// namespaces that do not exist. Each would wait for its namespace to reach the cache
// (newNamespaceWait) while holding one of the --webhook-max-in-flight slots; at most two
// wait at a time, the others are answered scope_unknown at once, so real creates
// through the API server meanwhile are each stamped at their create, as without a flood.
// Nothing is read for a namespace that does not exist.
func (s *suite) testUnknownNamespaceFlood(t *testing.T) {
	want := s.reference(t)
	var bodies [][]byte
	var nowhere []string
	for i := range 8 {
		ns := fmt.Sprintf("nowhere-%d", i)
		nowhere = append(nowhere, ns)
		bodies = append(bodies, forged{reqNS: ns, objNS: ns, name: "ghost", cms: []string{"cfg"}}.body())
	}
	f := s.flood(t, bodies, "unknown-ns")
	// Answered at once, they leave slots free: none finds them all taken.
	if f.stats.refused > 0 {
		t.Errorf("%d of %d reviews naming unknown namespaces refused as busy (429): waiters held the in-flight slots", f.stats.refused, f.stats.posted)
	}
	for i, d := range f.created {
		if f.stamps[i] != want {
			t.Errorf("%s created during the flood: config hash %q, want %q (as without a flood)", d.Name, f.stamps[i], want)
		}
	}
	if t.Failed() {
		failedOpen(t, f.mark)
	}
	s.floodBounded(t, f)
	s.noReads(t, f.mark, nowhere...)
}

// testFloodAtCapacity is the worst a poster who reaches the port can do: reviews in the
// scope of the largest size configstamp accepts, posted without pause. Real admissions
// queue behind them, so some are admitted unstamped (the webhook busy or too slow: the
// API server fails open); what must hold: every forged review is answered, memory stays
// under the chart's limit, configstamp lives, no real create is refused, and each real
// Deployment is either stamped at its create with the right hash or, admitted
// unstamped, recorded by the watcher within a minute as running the right config, with
// no rollout (its pod template untouched: adoption without a restart; the template is
// stamped at the next config change).
func (s *suite) testFloodAtCapacity(t *testing.T) {
	want := s.reference(t)
	body := forged{reqNS: flooded, objNS: flooded, name: "flood", cms: []string{"cfg"}, size: acceptedSize}.body()
	f := s.flood(t, [][]byte{body}, "capacity")
	var unstamped, records []*appsv1.Deployment
	for i, d := range f.created {
		switch f.stamps[i] {
		case want:
		case "":
			unstamped = append(unstamped, d)
			records = append(records, recorded(t, d, want))
		default:
			t.Errorf("%s created during the flood: config hash %q, want %q (as without a flood)", d.Name, f.stamps[i], want)
		}
	}
	// Later still no rollout: the record holds, the template is the created one and
	// the generation the record's.
	for i, d := range unstamped {
		now := deployments.Get(t, k8s, d.Namespace, d.Name)
		unrolled(t, now, d, want)
		if now.Generation != records[i].Generation {
			t.Errorf("%s: generation %d, %d when recorded: its spec changed after the record", d.Name, now.Generation, records[i].Generation)
		}
	}
	t.Logf("%d of %d real creates admitted unstamped during the flood, each recorded by the watcher after it, none rolled",
		len(unstamped), len(f.created))
	s.floodBounded(t, f)
}

// recorded waits up to a minute until the watcher has recorded the config of created
// (admitted unstamped), valid for its template, and checks it: want, with no rollout.
// It returns the Deployment as read then.
func recorded(t *testing.T, created *appsv1.Deployment, want string) *appsv1.Deployment {
	t.Helper()
	var d *appsv1.Deployment
	framework.Eventually(t, time.Minute, "record of "+created.Name, func() error {
		d = deployments.Get(t, k8s, created.Namespace, created.Name)
		if _, ok := stamp.ObservedFor(d.Annotations, &d.Spec.Template); !ok {
			return fmt.Errorf("no record valid for its template: %s=%q", stamp.ObservedAnnotation, d.Annotations[stamp.ObservedAnnotation])
		}
		// A record written while the webhook was busy (failed open) keeps its marker:
		// the watcher writes it again through the webhook, which takes the marker off
		// (an annotation change: the generation moves once more). Wait for that.
		if m, ok := d.Annotations[stamp.NudgeAnnotation]; ok {
			return fmt.Errorf("the record's marker %s=%q is still there", stamp.NudgeAnnotation, m)
		}
		return nil
	})
	unrolled(t, d, created, want)
	return d
}

// unrolled checks that d, created unstamped, carries a record of want valid for its
// template, and that its pod template is the created one (unstamped, not rolled). The
// generation cannot tell: a Deployment's annotation change, the record, bumps it.
func unrolled(t *testing.T, d, created *appsv1.Deployment, want string) {
	t.Helper()
	if o, ok := stamp.ObservedFor(d.Annotations, &d.Spec.Template); !ok || o.Hash != want {
		t.Errorf("%s: record %q, want one of %s valid for its template", d.Name, d.Annotations[stamp.ObservedAnnotation], want)
	}
	if !equality.Semantic.DeepEqual(d.Spec.Template, created.Spec.Template) {
		t.Errorf("%s rolled: its pod template changed since its create (config hash %q, created unstamped)", d.Name, deployments.Hash(d))
	}
}

// reference is the config hash of a create in realNS without a flood.
func (s *suite) reference(t *testing.T) string {
	t.Helper()
	ref := consumer(realNS, "reference", []string{"cfg"}, nil)
	create(t, ref, client.DryRunAll)
	want := deployments.Hash(ref)
	if want == "" {
		t.Fatal("a create without a flood is not stamped")
	}
	return want
}

// flood posts bodies (in turn) from floodWorkers posters until realCreates Deployments
// (named prefix-N) have been created through the API server.
func (s *suite) flood(t *testing.T, bodies [][]byte, prefix string) flooding {
	t.Helper()
	f := flooding{stats: floodStats{codes: map[int]int{}}}
	pid := s.cs.PID()
	var err error
	if f.hwmBefore, err = memory(pid, "VmHWM"); err != nil {
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
	st := &f.stats
	start := time.Now()
	for w := range floodWorkers {
		flood.Go(func() {
			for n := w; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				a := reviews.Post(s.hc, s.url, bodies[n%len(bodies)])
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
	f.mark = auditMark()
	for i := range realCreates {
		d := consumer(realNS, fmt.Sprintf("%s-%d", prefix, i), []string{"cfg"}, nil)
		start := time.Now()
		err := k8s.Create(bg, d)
		f.latencies = append(f.latencies, time.Since(start).Round(time.Millisecond))
		if err != nil {
			t.Errorf("create %s during the flood: %v", d.Name, err)
			continue
		}
		f.created = append(f.created, d)
		f.stamps = append(f.stamps, deployments.Hash(d))
	}
	halt()
	flood.Wait()
	sampling.Wait()
	f.took, f.peak = time.Since(start), peak.Load()
	t.Logf("real creates during the flood, each bounded by the registration's timeout (%v): %v", s.timeout, f.latencies)
	return f
}

// floodBounded checks what every flood must leave: each forged review answered,
// configstamp alive, its memory under the chart's limit.
func (s *suite) floodBounded(t *testing.T, f flooding) {
	t.Helper()
	st := f.stats
	t.Logf("flood, %d posters: %d posted in %v, HTTP codes %v, %d refused as busy, slowest answer %v, %d unanswered",
		floodWorkers, st.posted, f.took.Round(time.Millisecond), st.codes, st.refused, st.slowest.Round(time.Millisecond), len(st.errs))
	if len(st.errs) > 0 {
		t.Errorf("%d forged reviews got no answer; first: %v", len(st.errs), st.errs[0])
	}
	hwm, err := memory(s.cs.PID(), "VmHWM")
	if err != nil {
		t.Fatalf("configstamp gone after the flood? %v", err)
	}
	t.Logf("configstamp's memory (GOMEMLIMIT %s): VmHWM %s before the flood, %s after; VmRSS peak sampled during it %s",
		goMemLimit, mib(f.hwmBefore), mib(hwm), mib(f.peak))
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
