package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

// TestWindows checks the per-window count of nudges on made-up audit histories: one
// nudge per window passes; a second nudge in one window fails even when another window
// lost its nudge (the totals match); an empty window is excused only when the edits of
// other ConfigMaps around it waited longer than the window; the last window is never.
func TestWindows(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	o := object{namespace: "ns", configMap: "cm", deployment: "d"}
	other := object{namespace: "ns", configMap: "cm2", deployment: "d2"}
	// history with o's edits at 0 s and 30 s, and other's edit at 1 s nudged after wait s.
	hist := func(nudges []float64, reads []float64, wait float64) history {
		h := history{edits: map[string][]time.Time{}, reads: map[string][]time.Time{}, nudges: map[string][]time.Time{}, records: map[string][]time.Time{}}
		h.edits[o.configMapKey()] = []time.Time{at(0), at(30)}
		for _, s := range nudges {
			h.nudges[o.key()] = append(h.nudges[o.key()], at(s))
		}
		for _, s := range reads {
			h.reads[o.configMapKey()] = append(h.reads[o.configMapKey()], at(s))
		}
		h.edits[other.configMapKey()] = []time.Time{at(1)}
		h.nudges[other.key()] = []time.Time{at(1 + wait)}
		return h
	}
	for _, tc := range []struct {
		name          string
		h             history
		wantWrong     string // "" : none
		one, excused  int
		lost, doubled int
	}{
		{name: "one per window", h: hist([]float64{2, 32}, nil, 2), one: 2},
		{name: "double and lost", h: hist([]float64{2, 3}, nil, 2), wantWrong: "edit 1 nudged 2 times", one: 0, lost: 1, doubled: 1},
		{name: "lost, configstamp keeping up", h: hist([]float64{32}, nil, 2), wantWrong: "edit 1 not nudged before edit 2", one: 1, lost: 1},
		{name: "lost, read in the window", h: hist([]float64{32}, []float64{2}, 2), wantWrong: "read by configstamp 2s after the edit", one: 1, lost: 1},
		{name: "coalesced, configstamp behind", h: hist([]float64{40}, nil, 45), one: 1, excused: 1},
		{name: "last lost", h: hist([]float64{2}, nil, 2), wantWrong: "edit 2 (the last) never nudged", one: 1, lost: 1},
		{name: "nudge before the first edit", h: hist([]float64{-1, 2, 32}, nil, 2), wantWrong: "before its first edit", one: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v verdict
			lags := answerTimes([]object{o, other}, tc.h)
			wrong := strings.Join(v.windows(o, 2, tc.h, lags), "; ")
			if (tc.wantWrong == "") != (wrong == "") || !strings.Contains(wrong, tc.wantWrong) {
				t.Errorf("wrong %q, want %q", wrong, tc.wantWrong)
			}
			if v.windowsOne != tc.one || v.windowsExcused != tc.excused || v.windowsLost != tc.lost || v.windowsDouble != tc.doubled {
				t.Errorf("windows one %d, excused %d, lost %d, double %d; want %d, %d, %d, %d", v.windowsOne, v.windowsExcused, v.windowsLost, v.windowsDouble,
					tc.one, tc.excused, tc.lost, tc.doubled)
			}
		})
	}
}

// TestMarker classifies configstamp's PATCH bodies as the watcher sends them.
func TestMarker(t *testing.T) {
	for body, want := range map[string]string{
		`{"metadata":{"annotations":{"configstamp.io/nudge":"true"}}}`:                                                       "true",
		`{"metadata":{"annotations":{"configstamp.io/nudge":"key=0f4dd1f41f10"}}}`:                                           "key=0f4dd1f41f10",
		`{"metadata":{"resourceVersion":"7","annotations":{"configstamp.io/observed":"x","configstamp.io/nudge":"record"}}}`: "record",
		`{"metadata":{"annotations":{"other":"true"}}}`:                                                                      "",
		``: "",
	} {
		got, ok := marker(json.RawMessage(body))
		if got != want || ok != (want != "") {
			t.Errorf("marker(%s) = %q, %v; want %q", body, got, ok, want)
		}
	}
}

// TestLatencyPairsEachNudge pairs each nudge with the latest edit before it: a nudge
// that came after a second edit counts, from that edit.
func TestLatencyPairsEachNudge(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	o := object{namespace: "ns", configMap: "cm", deployment: "d"}
	edits := map[string][]time.Time{o.configMapKey(): {t0, t0.Add(30 * time.Second)}}
	nudges := map[string][]time.Time{o.key(): {t0.Add(40 * time.Second)}}
	l := measureLatency([]object{o}, edits, nudges)
	if l.n != 1 || l.max != 10*time.Second {
		t.Errorf("got %d pairs, max %s; want 1, 10s", l.n, l.max)
	}
}

// TestTrendsSkipMissing leaves a sample that could not be read out of the fit instead of
// taking it for zero.
func TestTrendsSkipMissing(t *testing.T) {
	var samples []sample
	for i := range 10 {
		x := sample{at: time.Duration(i) * time.Minute, rss: 100 << 20, heap: 50 << 20, goroutines: 100, files: 10}
		if i == 5 {
			x.heap, x.goroutines = math.NaN(), math.NaN()
		}
		samples = append(samples, x)
	}
	for _, tr := range trends(samples, 0, 10) {
		if tr.perHour != 0 || tr.min == 0 {
			t.Errorf("%s: slope %f, min %f; want 0 and the constant", tr.name, tr.perHour, tr.min)
		}
		if want := map[string]int{"Go heap in use": 1, "goroutines": 1}[tr.name]; tr.missing != want {
			t.Errorf("%s: %d missing, want %d", tr.name, tr.missing, want)
		}
	}
}
