package badinput

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/configstamp/configstamp/test/bench"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/promtext"
)

// scrape reads configstamp's Prometheus endpoint into "name{labels}" -> value.
func (s *suite) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	return promtext.MustScrape(t, s.metrics)
}

// admissions is the series of configstamp_admission_requests_total for one result.
func admissions(result string) string {
	return `configstamp_admission_requests_total{result="` + result + `"}`
}

// metricRises waits until the series exceeds before.
func (s *suite) metricRises(t *testing.T, series string, before float64) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, series, func() error {
		if v := s.scrape(t)[series]; v <= before {
			return fmt.Errorf("%s = %v, want more than %v", series, v, before)
		}
		return nil
	})
}

// logs returns configstamp's log records with msg whose fields include every pair of kv.
func (s *suite) logs(msg string, kv ...string) []map[string]any {
	var out []map[string]any
outer:
	for _, rec := range s.cs.Logs() {
		if rec["msg"] != msg {
			continue
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if fmt.Sprint(rec[kv[i]]) != kv[i+1] {
				continue outer
			}
		}
		out = append(out, rec)
	}
	return out
}

// logRises waits until configstamp has logged more than before records with msg (and kv).
func (s *suite) logRises(t *testing.T, before int, msg string, kv ...string) map[string]any {
	t.Helper()
	var recs []map[string]any
	framework.Eventually(t, 30*time.Second, "log line "+strconv.Quote(msg), func() error {
		if recs = s.logs(msg, kv...); len(recs) <= before {
			return fmt.Errorf("%d records, want more than %d", len(recs), before)
		}
		return nil
	})
	return recs[len(recs)-1]
}

// auditMark is where the audit log ends now: events after it belong to what follows.
func auditMark() bench.AuditMark { return bench.MarkAudit(env.Cluster.AuditLog) }

// reads returns configstamp's reads (get) of resource in ns logged after mark.
func reads(t *testing.T, mark bench.AuditMark, resource, ns string) []bench.AuditEvent {
	t.Helper()
	var out []bench.AuditEvent
	if err := bench.ReadAudit(env.Cluster.AuditLog, mark, func(ev *bench.AuditEvent) {
		if ev.User.Username == cluster.ConfigstampUser && ev.Verb == "get" && ev.ObjectRef.Resource == resource && ev.ObjectRef.Namespace == ns {
			out = append(out, *ev)
		}
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// maxOverlap is the largest number of events whose [received, completed] intervals
// overlap: a lower bound of the reads the client had in flight at once (each request is
// received after the client sent it and completed before the client has the answer).
func maxOverlap(evs []bench.AuditEvent) int {
	best := 0
	for _, a := range evs {
		n := 0
		for _, b := range evs {
			if !b.RequestReceivedTimestamp.After(a.RequestReceivedTimestamp) && !b.StageTimestamp.Before(a.RequestReceivedTimestamp) {
				n++
			}
		}
		best = max(best, n)
	}
	return best
}
