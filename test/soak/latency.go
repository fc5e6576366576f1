package main

import (
	"fmt"
	"slices"
	"time"
)

// latency is how long each edit waited for its nudge, from the audit log: the k-th
// nudge of a Deployment answers the k-th edit of its ConfigMap (each edit is one nudge
// when exactly-once holds; where it does not, the Deployment is left out). It includes
// the debounce. A median that grows from the first half of the edits to the second is
// a backlog building up.
type latency struct {
	n                     int
	p50, p90, p99, max    time.Duration
	firstHalf, secondHalf time.Duration // medians, by when the edit was made
}

func measureLatency(objs []object, edits, nudges map[string][]time.Time) latency {
	type pair struct {
		at  time.Time
		lag time.Duration
	}
	var pairs []pair
	for _, o := range objs {
		e, n := edits[o.configMapKey()], nudges[o.key()]
		if len(e) != len(n) {
			continue
		}
		for k := range e {
			pairs = append(pairs, pair{at: e[k], lag: n[k].Sub(e[k])})
		}
	}
	var l latency
	if len(pairs) == 0 {
		return l
	}
	slices.SortFunc(pairs, func(a, b pair) int { return a.at.Compare(b.at) })
	lags := func(ps []pair) []time.Duration {
		out := make([]time.Duration, len(ps))
		for i, p := range ps {
			out[i] = p.lag
		}
		slices.Sort(out)
		return out
	}
	all := lags(pairs)
	q := func(s []time.Duration, f float64) time.Duration { return s[min(len(s)-1, int(f*float64(len(s))))] }
	l.n = len(all)
	l.p50, l.p90, l.p99, l.max = q(all, 0.5), q(all, 0.9), q(all, 0.99), all[len(all)-1]
	half := len(pairs) / 2
	if half > 0 {
		l.firstHalf, l.secondHalf = q(lags(pairs[:half]), 0.5), q(lags(pairs[half:]), 0.5)
	}
	return l
}

func (l latency) String() string {
	r := func(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
	return fmt.Sprintf("p50 %s, p90 %s, p99 %s, max %s over %d edits; median %s in the first half of the edits, %s in the second",
		r(l.p50), r(l.p90), r(l.p99), r(l.max), l.n, r(l.firstHalf), r(l.secondHalf))
}
