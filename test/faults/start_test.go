package faults

import (
	"fmt"
	"hash/fnv"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/watcher"
)

// registration names the test's own dev-mode registration: each scenario installs
// configstamp afresh, so Deployments made before its first start are really installed
// over. The registration is deleted when the test ends (after its configstamps stop),
// so no stale one sends later scenarios' admissions to a dead URL.
func registration(t *testing.T) string {
	name := registrationName(t)
	t.Cleanup(func() {
		reg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := client.IgnoreNotFound(env.Client.Delete(bg, reg)); err != nil {
			t.Logf("delete registration %s: %v", name, err)
		}
	})
	return name
}

// registrationName is the test's registration name (and its Lease's).
func registrationName(t *testing.T) string {
	h := fnv.New32a()
	h.Write([]byte(t.Name()))
	return fmt.Sprintf("faults-%08x", h.Sum32())
}

// start runs one configstamp with its own registration and its metrics served.
func start(t *testing.T, o framework.Options) *cs {
	t.Helper()
	o.Args = append(append([]string(nil), o.Args...), "--dev-registration-name", registration(t))
	o, addr := withMetrics(t, o)
	return watch(t, env.Start(t, o), addr)
}

var (
	endsMu sync.Mutex
	ends   = map[*testing.T]*[]func(){}
)

// atEnd runs f when the test ends, after every cleanup registered after the test's
// first atEnd (its configstamps stop first), in reverse order of the atEnd calls.
func atEnd(t *testing.T, f func()) {
	endsMu.Lock()
	defer endsMu.Unlock()
	list, ok := ends[t]
	if !ok {
		list = new([]func())
		ends[t] = list
		t.Cleanup(func() {
			endsMu.Lock()
			fs := *list
			delete(ends, t)
			endsMu.Unlock()
			for i := len(fs) - 1; i >= 0; i-- {
				fs[i]()
			}
		})
	}
	*list = append(*list, f)
}

// installOver creates a fleet of n Deployments, calls start with it (configstamp's
// first start in this scenario) and waits until that fleet is adopted (recorded, not
// rolled).
func installOver(t *testing.T, n int, start func(before *fleet)) *fleet {
	t.Helper()
	before := newFleet(t, "installed over", n)
	start(before)
	before.waitRecords(t)
	return before
}

// createAfter creates a second fleet of n while configstamp runs and waits until both
// are at one rollout (the adopted one unstamped).
func createAfter(t *testing.T, before *fleet, n int) []*fleet {
	t.Helper()
	fleets := []*fleet{before, newFleet(t, "created after", n)}
	want := wants(t, fleets)
	want[before] = "" // adopted without a stamp
	rolledOut(t, fleets, 1, want)
	return fleets
}

// twoWays is installOver then createAfter.
func twoWays(t *testing.T, n int, start func()) []*fleet {
	t.Helper()
	return createAfter(t, installOver(t, n, func(*fleet) { start() }), n)
}

// inDebounce waits until c's watcher holds the edits of n ConfigMaps in their
// debounce (configstamp_debounce_pending{source="configmap"} is n) with no nudge yet:
// the change is pending, a fault now lands in the debounce window.
func inDebounce(t *testing.T, c *cs, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pending := int(c.metric(t, `configstamp_debounce_pending{source="configmap"}`))
		if nudged := c.nudges(t); nudged > 0 {
			t.Fatalf("%d nudges before %d ConfigMaps were seen pending: the debounce window was missed", nudged, n)
		}
		if pending == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d ConfigMaps pending in the debounce, want %d", pending, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fanOutStarted waits until c has nudged a first Deployment after an edit (polling
// fast, so a fault can land in the middle of the fan-out), and returns its nudges.
func fanOutStarted(t *testing.T, c *cs) int {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if n := c.nudges(t); n > 0 {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("fan-out did not start within a minute")
	return 0
}

// midFanOut fails the test unless a fault landed in the middle of the fan-out of
// total Deployments: at, the nudges done when it landed, is neither none nor all.
func midFanOut(t *testing.T, fault string, at, total int) {
	t.Helper()
	t.Logf("%s with %d of %d Deployments nudged", fault, at, total)
	if at == 0 || at >= total {
		t.Fatalf("%s with %d of %d Deployments nudged: not in the middle of the fan-out", fault, at, total)
	}
}

// nudgedAfter fails the test unless some Deployments were nudged after the fault.
func nudgedAfter(t *testing.T, fault string, n int) {
	t.Helper()
	t.Logf("%d Deployments nudged after %s", n, fault)
	if n <= 0 {
		t.Errorf("no Deployment nudged after %s: the fault did not cut the fan-out", fault)
	}
}

// tally is what a scenario's accounting of nudges starts from: c's nudges, and its
// checks whose nudge the webhook answered without a stamp because it could not read
// config (configstamp_checks_total{result="unread"}).
type tally struct{ nudges, unread int }

func (c *cs) tally(t *testing.T) tally {
	t.Helper()
	return tally{nudges: c.nudges(t), unread: int(c.metric(t, `configstamp_checks_total{result="unread"}`))}
}

// nudgedOnceEachOrUnread fails the test unless c, since from, made one nudge per
// Deployment of the fleets and one more for each nudge the webhook answered unstamped
// because its config read failed (a nudge in flight when the fault landed; retried),
// and unless no Deployment of the fleets has a StampBypassed Event: the webhook was
// called for every nudge. Call it once c is idle (after exactlyOnce).
func nudgedOnceEachOrUnread(t *testing.T, c *cs, fleets []*fleet, from tally) {
	t.Helper()
	now := c.tally(t)
	nudged, unread, n := now.nudges-from.nudges, now.unread-from.unread, total(fleets)
	t.Logf("configstamp_nudges_total rose by %d for %d Deployments; %d nudges answered unstamped, config unread", nudged, n, unread)
	if nudged != n+unread {
		t.Errorf("configstamp_nudges_total rose by %d for %d Deployments with %d unread, want %d", nudged, n, unread, n+unread)
	}
	for _, f := range fleets {
		evs, err := f.bypassEvents()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			t.Errorf("%s (%s): a %s Event, want none (every nudge reached the webhook): %s", f.ns, f.mode, watcher.ReasonStampBypassed, e)
		}
	}
}
