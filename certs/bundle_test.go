package certs

import (
	"crypto/x509"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

func testCA(t *testing.T, at time.Time, validity time.Duration) *x509.Certificate {
	t.Helper()
	ca, _, err := newCA(at, validity)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// TestNextBundle: which CAs the registration's bundle holds, in which order, and what
// its record says of each, from the bundle and record as read, the CAs wanted and the
// CA served.
func TestNextBundle(t *testing.T) {
	now := t0.Add(2 * time.Hour)
	const retention = time.Hour
	a := testCA(t, t0, 48*time.Hour)
	b := testCA(t, t0.Add(time.Hour), 48*time.Hour) // newer than a
	expired := testCA(t, t0.Add(-48*time.Hour), 24*time.Hour)
	twin1, twin2 := testCA(t, t0, 48*time.Hour), testCA(t, t0, 48*time.Hour) // the same NotBefore
	if fingerprint(twin2) < fingerprint(twin1) {
		twin1, twin2 = twin2, twin1
	}
	at := func(d time.Duration) time.Time { return now.Add(d) }
	ptr := func(t time.Time) *time.Time { return &t }
	record := func(m map[*x509.Certificate]caState) string {
		st := map[string]caState{}
		for c, s := range m {
			st[fingerprint(c)] = s
		}
		j, _ := json.Marshal(st)
		return string(j)
	}
	type held struct {
		ca *x509.Certificate
		caState
	}
	cases := []struct {
		name    string
		entries [][]byte
		record  string
		known   map[*x509.Certificate]time.Time
		want    []*x509.Certificate
		served  *x509.Certificate
		next    []held
	}{
		{name: "install: into empty entries, trusted from the start",
			entries: [][]byte{nil, nil}, want: []*x509.Certificate{a},
			next: []held{{a, caState{}}}},
		{name: "nothing in the entries but a CA served: a new CA joins now, the served one retires",
			entries: [][]byte{nil}, served: a, want: []*x509.Certificate{b},
			next: []held{{b, caState{Since: now}}, {a, caState{Retired: ptr(now)}}}},
		{name: "a new CA joins now beside the trusted one, newest first",
			entries: [][]byte{pemCerts([]*x509.Certificate{a})}, record: record(map[*x509.Certificate]caState{a: {Since: t0}}),
			want: []*x509.Certificate{a, b},
			next: []held{{b, caState{Since: now}}, {a, caState{Since: t0}}}},
		{name: "a CA one entry lacks joins now",
			entries: [][]byte{pemCerts([]*x509.Certificate{a}), nil}, record: record(map[*x509.Certificate]caState{a: {Since: t0}}),
			want: []*x509.Certificate{a},
			next: []held{{a, caState{Since: now}}}},
		{name: "trusted before any record: since when this process knew it",
			entries: [][]byte{pemCerts([]*x509.Certificate{a})}, known: map[*x509.Certificate]time.Time{a: t0},
			want: []*x509.Certificate{a},
			next: []held{{a, caState{Since: t0}}}},
		{name: "trusted before any record, not known: since a time not known",
			entries: [][]byte{pemCerts([]*x509.Certificate{a})}, record: "not JSON",
			want: []*x509.Certificate{a},
			next: []held{{a, caState{}}}},
		{name: "trusted, but missing from a record: since now, or later if known so",
			entries: [][]byte{pemCerts([]*x509.Certificate{a, b})}, record: record(map[*x509.Certificate]caState{a: {Since: t0}}),
			known: map[*x509.Certificate]time.Time{a: t0.Add(-time.Hour), b: at(time.Minute)},
			want:  []*x509.Certificate{a, b},
			next:  []held{{b, caState{Since: at(time.Minute)}}, {a, caState{Since: t0}}}},
		{name: "a record ahead of now counts as now",
			entries: [][]byte{pemCerts([]*x509.Certificate{a})}, record: record(map[*x509.Certificate]caState{a: {Since: at(time.Hour)}}),
			want: []*x509.Certificate{a},
			next: []held{{a, caState{Since: now}}}},
		{name: "a join this process knows to be later than the record counts as that",
			entries: [][]byte{pemCerts([]*x509.Certificate{a})}, record: record(map[*x509.Certificate]caState{a: {Since: t0}}),
			known: map[*x509.Certificate]time.Time{a: t0.Add(time.Hour)},
			want:  []*x509.Certificate{a},
			next:  []held{{a, caState{Since: t0.Add(time.Hour)}}}},
		{name: "no longer wanted: retired now, kept",
			entries: [][]byte{pemCerts([]*x509.Certificate{a, b})}, record: record(map[*x509.Certificate]caState{a: {Since: t0}, b: {Since: t0.Add(time.Hour)}}),
			want: []*x509.Certificate{a},
			next: []held{{b, caState{Since: t0.Add(time.Hour), Retired: ptr(now)}}, {a, caState{Since: t0}}}},
		{name: "retired, within the retention: kept as retired",
			entries: [][]byte{pemCerts([]*x509.Certificate{a, b})}, record: record(map[*x509.Certificate]caState{a: {Since: t0}, b: {Since: t0, Retired: ptr(at(-retention + time.Second))}}),
			want: []*x509.Certificate{a},
			next: []held{{b, caState{Since: t0, Retired: ptr(at(-retention + time.Second))}}, {a, caState{Since: t0}}}},
		{name: "retired for the retention: dropped",
			entries: [][]byte{pemCerts([]*x509.Certificate{a, b})}, record: record(map[*x509.Certificate]caState{a: {Since: t0}, b: {Since: t0, Retired: ptr(at(-retention))}}),
			want: []*x509.Certificate{a},
			next: []held{{a, caState{Since: t0}}}},
		{name: "a retired mark ahead of now counts as now",
			entries: [][]byte{pemCerts([]*x509.Certificate{a, b})}, record: record(map[*x509.Certificate]caState{a: {Since: t0}, b: {Since: t0, Retired: ptr(at(time.Hour))}}),
			want: []*x509.Certificate{a},
			next: []held{{b, caState{Since: t0, Retired: ptr(now)}}, {a, caState{Since: t0}}}},
		{name: "wanted again within the retention: stays retired",
			entries: [][]byte{pemCerts([]*x509.Certificate{a, b})}, record: record(map[*x509.Certificate]caState{a: {Since: t0}, b: {Since: t0, Retired: ptr(at(-time.Minute))}}),
			want: []*x509.Certificate{a, b},
			next: []held{{b, caState{Since: t0, Retired: ptr(at(-time.Minute))}}, {a, caState{Since: t0}}}},
		{name: "wanted again after the retention: no longer retired",
			entries: [][]byte{pemCerts([]*x509.Certificate{a, b})}, record: record(map[*x509.Certificate]caState{a: {Since: t0}, b: {Since: t0, Retired: ptr(at(-retention))}}),
			want: []*x509.Certificate{a, b},
			next: []held{{b, caState{Since: t0}}, {a, caState{Since: t0}}}},
		{name: "expired CAs leave, wanted or not; a CA wanted twice is held once",
			entries: [][]byte{pemCerts([]*x509.Certificate{a, expired})}, record: record(map[*x509.Certificate]caState{a: {Since: t0}, expired: {Since: t0}}),
			want: []*x509.Certificate{a, expired, a},
			next: []held{{a, caState{Since: t0}}}},
		{name: "the served CA stays after a replace emptied the entries, the record and the Secret",
			entries: [][]byte{nil}, served: a,
			next: []held{{a, caState{Retired: ptr(now)}}}},
		{name: "the served CA, wanted, keeps its record when a replace emptied the entries",
			entries: [][]byte{nil}, served: a, record: record(map[*x509.Certificate]caState{a: {Since: t0}}),
			want: []*x509.Certificate{a},
			next: []held{{a, caState{Since: t0}}}},
		{name: "an expired served CA does not",
			entries: [][]byte{nil}, served: expired,
			next: []held{}},
		{name: "the same NotBefore: ordered by fingerprint",
			entries: [][]byte{pemCerts([]*x509.Certificate{twin2, twin1})}, record: record(map[*x509.Certificate]caState{twin1: {Since: t0}, twin2: {Since: t0}}),
			want: []*x509.Certificate{twin2, twin1},
			next: []held{{twin1, caState{Since: t0}}, {twin2, caState{Since: t0}}}},
	}
	name := func(c *x509.Certificate) string {
		for n, o := range map[string]*x509.Certificate{"a": a, "b": b, "expired": expired, "twin1": twin1, "twin2": twin2} {
			if o.Equal(c) {
				return n
			}
		}
		return "?"
	}
	show := func(cs []*x509.Certificate) string {
		var ns []string
		for _, c := range cs {
			ns = append(ns, name(c))
		}
		return strings.Join(ns, ",")
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			known := map[string]time.Time{}
			for c, at := range tc.known {
				known[fingerprint(c)] = at
			}
			next, states := nextBundle(bundleInput{entries: tc.entries, record: tc.record, known: known,
				want: pemCerts(tc.want), served: tc.served, now: now, retention: retention})
			var wantCAs []*x509.Certificate
			for _, h := range tc.next {
				wantCAs = append(wantCAs, h.ca)
			}
			if !slices.EqualFunc(next, wantCAs, (*x509.Certificate).Equal) {
				t.Fatalf("bundle %s, want %s", show(next), show(wantCAs))
			}
			if len(states) != len(tc.next) {
				t.Errorf("record of %d CAs, want %d", len(states), len(tc.next))
			}
			for _, h := range tc.next {
				got, ok := states[fingerprint(h.ca)]
				if !ok || !got.Since.Equal(h.Since) || (got.Retired == nil) != (h.Retired == nil) ||
					(got.Retired != nil && !got.Retired.Equal(*h.Retired)) {
					t.Errorf("%s: record %+v, want %+v", name(h.ca), showState(got), showState(h.caState))
				}
			}
		})
	}
}

func showState(s caState) string {
	r := "since " + s.Since.Format(time.RFC3339)
	if s.Retired != nil {
		r += ", retired " + s.Retired.Format(time.RFC3339)
	}
	return r
}
