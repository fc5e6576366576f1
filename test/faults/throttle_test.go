package faults

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/configstamp/configstamp/test/framework"
)

// The retry settings the bound on requests during faults is derived from.
const (
	faultWindow = 10 * time.Second
	// retryBase is the watcher's first retry delay of a failed check (watcher.Options
	// RetryBase, default 500ms), doubled at each failure of the same workload.
	retryBase = 500 * time.Millisecond
	// reflectorBase is client-go's first delay before an informer lists and watches
	// again after a failure (reflector backoff, 800ms), doubled likewise.
	reflectorBase = 800 * time.Millisecond
	// perCheck is the most requests one check makes before it fails (a live read of
	// the workload, a metadata read and a content read of its ConfigMap, the nudge),
	// each retried once by client-go after a 429 (Retry-After); no other answer is
	// retried by client-go.
	perCheck = 4 * 2
	// informers is an upper bound on the watches configstamp keeps (workload kinds,
	// ConfigMaps, Namespaces, the registration, with room to spare).
	informers = 10
	// background allows for the rest: leader election is off; Events, coverage.
	background = 20
)

// attempts is how many tries something retried with exponential backoff from base
// makes within window: tries at 0, base, 3 base, 7 base, ...
func attempts(window, base time.Duration) int {
	return 1 + int(math.Log2(float64(window)/float64(base)+1))
}

// TestThrottled puts a proxy in front of the API server for configstamp alone and,
// during a change and its fan-out, answers every request of configstamp's for ten
// seconds, open watches cut: five seconds of 429 (Retry-After: 1), then five of 500
// and 503. configstamp must back
// off (the requests the proxy saw stay under a bound derived from the retry settings:
// no tight loop) and heal afterwards, exactly once. Its client-side rate limit is
// raised far above what the bound allows, so that it cannot hide a missing backoff.
func TestThrottled(t *testing.T) {
	fp := framework.NewFaultProxy(t, env.Cluster)
	fleets := twoWays(t, 8, func() {
		start(t, framework.Options{Kubeconfig: fp.Kubeconfig, Args: []string{"--kube-api-qps", "1000", "--kube-api-burst", "2000"}})
	})
	editAll(t, fleets, "2")
	// First 429 with Retry-After, which client-go itself honours (it waits and retries
	// the request), then 500 and 503, which it does not retry: only configstamp's own
	// backoff paces it then.
	fp.StartFaults(http.StatusTooManyRequests)
	began := time.Now()
	time.Sleep(faultWindow / 2)
	fp.StartFaults(http.StatusInternalServerError, http.StatusServiceUnavailable)
	time.Sleep(faultWindow / 2)
	n, summary := fp.StopFaults()
	window := time.Since(began)
	ended := time.Now()
	items := total(fleets) + len(fleets) // the Deployments and their ConfigMaps
	bound := items*attempts(window, retryBase)*perCheck + informers*attempts(window, reflectorBase)*2 + background
	t.Logf("%d requests answered with 429/500/503 in %.1fs (bound %d):\n%s", n, window.Seconds(), bound, summary)
	if n > bound {
		t.Errorf("%d requests during %.1fs of faults, more than the %d the retry settings allow: no backoff somewhere", n, window.Seconds(), bound)
	}
	exactlyOnce(t, fleets, 2, ended, "the faults ended")
}
