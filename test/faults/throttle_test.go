package faults

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/watcher"
)

// The settings the bounds on requests during faults are derived from.
const (
	phase = 5 * time.Second
	// retryBase is the watcher's first retry delay of a failed check (watcher.Options
	// RetryBase, default 500ms), doubled at each failure of the same workload.
	retryBase = 500 * time.Millisecond
	// retryAfter is what the proxy's 429s ask for (Retry-After: 1).
	retryAfter = time.Second
	// reflectorBase is client-go's first delay before an informer lists and watches
	// again after a failure (reflector backoff, 800ms, jittered upwards), doubled
	// likewise.
	reflectorBase = 800 * time.Millisecond
	// informers is an upper bound on the watches configstamp keeps (workload kinds,
	// ConfigMaps, Namespaces, the registration, with room to spare).
	informers = 10
	// background allows for the rest: Events, the registration's coverage; leader
	// election is off.
	background = 20
)

// attempts is how many tries something retried with exponential backoff from base
// makes within window: tries at 0, base, 3 base, 7 base, ...
func attempts(window, base time.Duration) int {
	return 1 + int(math.Log2(float64(window)/float64(base)+1))
}

// TestThrottled puts a proxy in front of the API server for configstamp alone and,
// while a change waits out its debounce and then fans out, answers every request of
// configstamp's itself, open watches cut: five seconds of 429 (Retry-After: 1), then
// five of 500 and 503. configstamp must back off (the requests the proxy saw, phase by
// phase, stay under bounds derived from the retry settings: no tight loop) and heal
// afterwards, exactly once. Its client-side rate limit is raised far above what the
// bounds allow, so that it cannot hide a missing backoff.
func TestThrottled(t *testing.T) {
	fp := framework.NewFaultProxy(t, env.Cluster)
	var c *cs
	fleets := twoWays(t, 8, func() {
		c = start(t, framework.Options{Kubeconfig: fp.Kubeconfig, Args: []string{"--kube-api-qps", "1000", "--kube-api-burst", "2000"}})
	})
	editAll(t, fleets, "2")
	// The watcher holds the change (it only has to hand it on once the debounce ends),
	// so the faults meet the checks, not a watch that has not delivered the edits yet.
	inDebounce(t, c, len(fleets))
	// First 429 with Retry-After, which client-go itself honours (it waits and retries
	// the request, up to 10 times), then 500 and 503, which it does not retry: only
	// configstamp's own backoff paces it then.
	fp.StartFaults(http.StatusTooManyRequests)
	time.Sleep(phase)
	fp.StartFaults(http.StatusInternalServerError, http.StatusServiceUnavailable)
	time.Sleep(phase)
	phases := fp.StopFaults()
	ended := time.Now()
	throttled, failing := phases[0], phases[1]
	n := total(fleets) // the Deployments: the items the checks are about
	for i, ph := range phases {
		t.Logf("phase %d (%v, %.1fs): %d requests answered with a fault, %d of them the checks':\n%s",
			i+1, ph.Codes, ph.Duration().Seconds(), ph.Total, ph.Check, ph.Summary())
	}
	if throttled.Check == 0 || failing.Check == 0 {
		t.Fatalf("checks answered with a fault: %d with 429, %d with 500/503: the faults missed the checks", throttled.Check, failing.Check)
	}
	// 429 phase: client-go retries a 429 itself after its Retry-After, so each of the
	// watcher's workers (watcher.DefaultConcurrency for Deployments) has one request
	// in flight, sent again every retryAfter: at most window/retryAfter + 1 each.
	checkBound1 := watcher.DefaultConcurrency * (int(throttled.Duration()/retryAfter) + 1)
	// 500/503 phase: client-go retries neither, so a check stops at its first request
	// (a check still retrying a 429 when the phase began fails with its next request:
	// one request too). Each Deployment is then retried by the work queue after
	// RetryBase doubled at each failure: within the phase, tries at 0, base, 3 base, ...
	// at the earliest (a Deployment that had failed before waits longer), so at most
	// attempts(phase, RetryBase) each. Besides, each may be handed on once by its
	// ConfigMap's fan-out (an immediate add, outside its backoff) when the debounce
	// ends: one more each.
	checkBound2 := n*attempts(failing.Duration(), retryBase) + n
	// The rest (lists and watches, Events, the registration): informers retried by
	// client-go after each 429, then by their reflector's backoff.
	restBound := informers*(int(throttled.Duration()/retryAfter)+1+attempts(failing.Duration(), reflectorBase)+1) + background
	rest := throttled.Total - throttled.Check + failing.Total - failing.Check
	t.Logf("the checks' requests: %d with 429 (bound %d), %d with 500/503 (bound %d: %d Deployments x %d attempts + %d); the rest: %d (bound %d)",
		throttled.Check, checkBound1, failing.Check, checkBound2, n, attempts(failing.Duration(), retryBase), n, rest, restBound)
	if throttled.Check > checkBound1 {
		t.Errorf("%d check requests in %.1fs of 429s, more than the %d client-go's Retry-After allows", throttled.Check, throttled.Duration().Seconds(), checkBound1)
	}
	if failing.Check > checkBound2 {
		t.Errorf("%d check requests in %.1fs of 500/503, more than the %d the watcher's retry backoff allows: no backoff somewhere", failing.Check, failing.Duration().Seconds(), checkBound2)
	}
	if rest > restBound {
		t.Errorf("%d other requests during %.1fs of faults, more than the %d the retry settings allow", rest, (throttled.Duration() + failing.Duration()).Seconds(), restBound)
	}
	exactlyOnce(t, fleets, 2, ended, "the faults ended", c)
}
