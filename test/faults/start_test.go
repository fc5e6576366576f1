package faults

import (
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/framework"
)

// registration names the test's own dev-mode registration (and Lease): each scenario
// installs configstamp afresh, so Deployments made before its first start are really
// installed over. The registration is deleted when the test ends (after its
// configstamps stop), so no stale one sends later scenarios' admissions to a dead URL.
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

// start runs one configstamp with its own registration.
func start(t *testing.T, o framework.Options) *framework.Configstamp {
	t.Helper()
	o.Args = append(o.Args, "--dev-registration-name", registration(t))
	return env.Start(t, o)
}

// twoWays creates a fleet of n Deployments, calls start (configstamp's first start in
// this scenario), waits until that fleet is adopted (recorded, not rolled), and creates
// a second fleet of n while configstamp runs. Both fleets are then at one rollout.
func twoWays(t *testing.T, n int, start func()) []*fleet {
	t.Helper()
	before := newFleet(t, "installed over", n)
	start()
	before.waitRecords(t)
	fleets := []*fleet{before, newFleet(t, "created after", n)}
	want := wants(t, fleets)
	want[before] = "" // adopted without a stamp
	rolledOut(t, fleets, 1, want)
	return fleets
}

// fanOutStarted waits until the first Deployment of the fan-out that follows an edit
// is stamped with the new hash (polling fast, so a fault can land in the middle of the
// fan-out), and returns how many of all were stamped by then.
func fanOutStarted(t *testing.T, fleets []*fleet) int {
	t.Helper()
	want := wants(t, fleets)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		done := 0
		for _, f := range fleets {
			n, _ := f.stamped(want[f])
			done += n
		}
		if done > 0 {
			return done
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("fan-out did not start within a minute")
	return 0
}
