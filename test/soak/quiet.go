package main

import (
	"fmt"
	"time"

	"github.com/configstamp/configstamp/test/bench"
)

// waitIdle waits until configstamp has worked off what the objects' creation gave it
// (every new ConfigMap's dependents checked): no source waiting out its debounce, empty
// work queues and no check for a few seconds. Edits made before would wait behind
// that backlog and measure it.
func waitIdle(metricsAddr string, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	last := -1.0
	for {
		pending, err1 := bench.MetricSum(metricsAddr, "configstamp_debounce_pending")
		depth, err2 := bench.MetricSum(metricsAddr, "workqueue_depth")
		checks, err3 := bench.MetricSum(metricsAddr, "configstamp_checks_total")
		took := time.Since(start)
		if err1 == nil && err2 == nil && err3 == nil && pending == 0 && depth == 0 && checks == last {
			return took, nil
		}
		if took > timeout {
			return 0, fmt.Errorf("configstamp not idle after %s (sources debouncing %.0f, queued %.0f, checks %.0f; %v %v %v)", timeout, pending, depth, checks, err1, err2, err3)
		}
		last = checks
		time.Sleep(5 * time.Second)
	}
}
