package security

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/configstamp/configstamp/test/bench"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/reviews"
)

// noReads fails if the audit log holds, after mark, any request by configstamp's user
// for a ConfigMap or Secret in one of the namespaces: a get (live read, metadata-only
// or not), a list or a watch there.
func (s *suite) noReads(t *testing.T, mark bench.AuditMark, namespaces ...string) {
	t.Helper()
	var got []string
	if err := bench.ReadAuditStrict(env.Cluster.AuditLog, mark, func(ev *bench.AuditEvent) {
		if ev.User.Username == cluster.ConfigstampUser && slices.Contains(namespaces, ev.ObjectRef.Namespace) &&
			(ev.ObjectRef.Resource == "configmaps" || ev.ObjectRef.Resource == "secrets") && ev.Stage == "ResponseComplete" {
			got = append(got, fmt.Sprintf("%s %s %s/%s", ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Namespace, ev.ObjectRef.Name))
		}
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) > 0 {
		t.Errorf("configstamp read %d times in %v, where it must not read; first: %v", len(got), namespaces, got[:min(len(got), 5)])
	}
}

// logMark is where configstamp's output ends now.
func (s *suite) logMark() int { return len(s.cs.Output()) }

// settle posts a review in scope and waits until configstamp logs having stamped it,
// and until the API server has logged its read: whatever the reviews posted before did
// has by then reached configstamp's log (one ordered stream) and the audit log.
// Returns configstamp's output from mark up to that line.
func (s *suite) settle(t *testing.T, mark int) string {
	t.Helper()
	s.probes++
	name := fmt.Sprintf("probe-%d", s.probes)
	f := forged{reqNS: sentinelNS, objNS: sentinelNS, name: name, cms: []string{"cfg"}}
	auditFrom := auditMark()
	if a := reviews.Post(s.hc, s.url, f.body()); a.Err != nil || a.Response() == nil || len(a.Response().Patch) == 0 {
		t.Fatalf("a review in scope after the forged ones: want stamped, got %v %d %.300s", a.Err, a.Code, a.Body)
	}
	var out string
	framework.Eventually(t, 30*time.Second, "configstamp's log line of "+name, func() error {
		all := s.cs.Output()[mark:]
		if i := strings.Index(all, `"name":"`+name+`"`); i >= 0 {
			out = all[:i]
			return nil
		}
		return fmt.Errorf("no log line names %s", name)
	})
	framework.Eventually(t, 30*time.Second, "the audit event of "+name+"'s read", func() error {
		found := false
		err := bench.ReadAudit(env.Cluster.AuditLog, auditFrom, func(ev *bench.AuditEvent) {
			found = found || (ev.User.Username == cluster.ConfigstampUser && ev.ObjectRef.Namespace == sentinelNS && ev.Stage == "ResponseComplete")
		})
		if err == nil && !found {
			err = fmt.Errorf("no read of %s logged", sentinelNS)
		}
		return err
	})
	return out
}

// noLogLines fails if a line of out names one of the namespaces.
func noLogLines(t *testing.T, out string, namespaces ...string) {
	t.Helper()
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		for _, ns := range namespaces {
			if strings.Contains(sc.Text(), `"`+ns+`"`) || strings.Contains(sc.Text(), ns+"/") {
				lines = append(lines, sc.Text())
				break
			}
		}
	}
	if len(lines) > 0 {
		t.Errorf("configstamp logged %d lines naming %v, outside its scope; first: %.400s", len(lines), namespaces, lines[0])
	}
}

// memory reads a field of /proc/PID/status (VmRSS, VmHWM) in bytes.
func memory(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err != nil {
				return 0, fmt.Errorf("%s: %w", field, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
