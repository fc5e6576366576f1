package main

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/configstamp/configstamp/test/bench"
	"github.com/configstamp/configstamp/test/framework"
)

// sample is configstamp's resources at one moment of the edits.
type sample struct {
	at                time.Duration // since the edits began
	rss, heap         float64       // bytes
	goroutines, files float64
	nudges            float64 // configstamp_nudges_total
	alive             bool
}

// sampler reads configstamp's resources: RSS and open files from /proc, the Go heap in
// use and goroutines from its metrics endpoint.
type sampler struct {
	p       *framework.Configstamp
	metrics string
	mu      sync.Mutex
	samples []sample
}

func newSampler(p *framework.Configstamp, metricsAddr string) *sampler {
	return &sampler{p: p, metrics: metricsAddr}
}

// run samples every interval until ctx ends, printing each sample.
func (s *sampler) run(ctx context.Context, every time.Duration) {
	start := time.Now()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		x := s.take(time.Since(start))
		s.mu.Lock()
		s.samples = append(s.samples, x)
		s.mu.Unlock()
		fmt.Printf("  %6s  RSS %s  heap %s  goroutines %.0f  open files %.0f  nudges %.0f\n", x.at.Round(time.Second),
			mib(x.rss), mib(x.heap), x.goroutines, x.files, x.nudges)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// take reads one sample. A value that could not be read (a failed scrape, /proc not
// readable) is NaN: left out of the trends, not taken for a zero.
func (s *sampler) take(at time.Duration) sample {
	nan := math.NaN()
	x := sample{at: at, alive: s.p.Alive(), rss: nan, heap: nan, goroutines: nan, files: nan, nudges: nan}
	pid := s.p.PID()
	if r, err := bench.RSS(pid); err == nil {
		x.rss = float64(r)
	}
	if n, err := bench.OpenFiles(pid); err == nil {
		x.files = float64(n)
	}
	metric := func(name string) float64 {
		v, err := bench.Metric(s.metrics, name)
		if err != nil {
			fmt.Printf("  %6s  %s not read: %v\n", at.Round(time.Second), name, err)
			return nan
		}
		return v
	}
	x.heap = metric("go_memstats_heap_inuse_bytes")
	x.goroutines = metric("go_goroutines")
	x.nudges = metric("configstamp_nudges_total")
	return x
}

// trend is one resource over the samples after the warm-up.
type trend struct {
	name           string
	bytes          bool
	min, max, mean float64
	first, last    float64
	perHour        float64 // least-squares slope
	suspected      bool
	samples        int     // after the warm-up, with a value
	missing        int     // after the warm-up, without one (not read)
	tolerancePerH  float64 // the slope above which a leak is suspected: the least detectable
	window         time.Duration
}

// minWindow is the shortest span of samples whose slope is judged: over a few minutes
// the Go collector's sawtooth (several MiB of heap) and a connection opened or closed
// make slopes of tens of percent per hour either way.
const minWindow = 10 * time.Minute

// resources names what is sampled, how it is read from a sample, and the least slope
// per hour that counts as growth whatever the mean (noise of a few units).
var resources = []struct {
	name  string
	bytes bool
	floor float64
	value func(sample) float64
}{
	{"RSS", true, 1 << 20, func(x sample) float64 { return x.rss }},
	{"Go heap in use", true, 1 << 20, func(x sample) float64 { return x.heap }},
	{"goroutines", false, 5, func(x sample) float64 { return x.goroutines }},
	{"open files", false, 5, func(x sample) float64 { return x.files }},
}

// trends fits a line to each resource over the samples taken after warmup and flags a
// slope above tolerance percent of the mean per hour (and above the resource's floor)
// as a suspected leak.
func trends(samples []sample, warmup time.Duration, tolerance float64) []trend {
	var out []trend
	for _, r := range resources {
		t := trend{name: r.name, bytes: r.bytes, min: math.Inf(1), max: math.Inf(-1)}
		var xs, ys []float64
		var first, last time.Duration
		for _, x := range samples {
			if x.at < warmup {
				continue
			}
			y := r.value(x)
			if math.IsNaN(y) {
				t.missing++
				continue
			}
			if len(xs) == 0 {
				first = x.at
			}
			last = x.at
			xs, ys = append(xs, x.at.Hours()), append(ys, y)
		}
		t.samples = len(xs)
		if len(xs) < 3 {
			out = append(out, t)
			continue
		}
		for _, y := range ys {
			t.min, t.max = min(t.min, y), max(t.max, y)
			t.mean += y / float64(len(ys))
		}
		t.first, t.last = ys[0], ys[len(ys)-1]
		t.perHour = slope(xs, ys)
		t.window = last - first
		t.tolerancePerH = max(tolerance/100*t.mean, r.floor)
		t.suspected = t.perHour > t.tolerancePerH && t.window >= minWindow
		out = append(out, t)
	}
	return out
}

// slope is the least-squares slope of ys over xs.
func slope(xs, ys []float64) float64 {
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(len(xs))
	my /= float64(len(ys))
	var cov, vx float64
	for i := range xs {
		cov += (xs[i] - mx) * (ys[i] - my)
		vx += (xs[i] - mx) * (xs[i] - mx)
	}
	if vx == 0 {
		return 0
	}
	return cov / vx
}

// mib formats a byte count that may be missing (NaN).
func mib(b float64) string {
	if math.IsNaN(b) {
		return "-"
	}
	return bench.MiB(int64(b))
}
