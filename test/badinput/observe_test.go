package badinput

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

// scrape reads configstamp's Prometheus endpoint into "name{labels}" -> value.
func (s *suite) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + s.metrics + "/metrics")
	if err != nil {
		t.Fatalf("scrape metrics: %v", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.LastIndexByte(line, ' '); i > 0 && !strings.HasPrefix(line, "#") {
			if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
				out[line[:i]] = v
			}
		}
	}
	return out
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

// auditEvent is what the tests read of an API server audit event.
type auditEvent struct {
	Verb      string
	User      struct{ Username string }
	ObjectRef struct{ Resource, Namespace, Name string }
	Received  time.Time `json:"requestReceivedTimestamp"`
	Completed time.Time `json:"stageTimestamp"`
}

// auditMark is where the audit log ends now: events after it belong to what follows.
func auditMark(t *testing.T) int64 {
	t.Helper()
	fi, err := os.Stat(env.Cluster.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// reads returns configstamp's reads (get) of resource in ns logged after mark.
func reads(t *testing.T, mark int64, resource, ns string) []auditEvent {
	t.Helper()
	f, err := os.Open(env.Cluster.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(mark, 0); err != nil {
		t.Fatal(err)
	}
	var out []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev auditEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		if ev.User.Username == cluster.ConfigstampUser && ev.Verb == "get" && ev.ObjectRef.Resource == resource && ev.ObjectRef.Namespace == ns {
			out = append(out, ev)
		}
	}
	return out
}

// maxOverlap is the largest number of events whose [received, completed] intervals
// overlap: a lower bound of the reads the client had in flight at once (each request is
// received after the client sent it and completed before the client has the answer).
func maxOverlap(evs []auditEvent) int {
	best := 0
	for _, a := range evs {
		n := 0
		for _, b := range evs {
			if !b.Received.After(a.Received) && !b.Completed.Before(a.Received) {
				n++
			}
		}
		best = max(best, n)
	}
	return best
}
