package main

import (
	"fmt"
	"slices"
	"time"
)

// latency is how long configstamp took from an edit to its nudge, from the audit log:
// each nudge of a Deployment is paired with the latest edit of its ConfigMap before it
// (so a nudge that came late, even after a second edit, still counts; an edit that
// never got a nudge of its own is a violation the windows report). It includes the
// debounce. A median that grows from the first half of the edits to the second is a
// backlog building up.
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
		e := edits[o.configMapKey()]
		for _, t := range nudges[o.key()] {
			// The latest edit before the nudge (edits are in the audit log's order).
			k := len(e) - 1
			for k >= 0 && !e[k].Before(t) {
				k--
			}
			if k >= 0 {
				pairs = append(pairs, pair{at: e[k], lag: t.Sub(e[k])})
			}
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
	return fmt.Sprintf("p50 %s, p90 %s, p99 %s, max %s over %d nudges; median %s in the first half of the edits, %s in the second",
		r(l.p50), r(l.p90), r(l.p99), r(l.max), l.n, r(l.firstHalf), r(l.secondHalf))
}
