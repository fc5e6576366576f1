package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

// AuditMark is a position in the API server's audit log.
type AuditMark int64

// MarkAudit is the audit log's current end: events after it are the ones to come.
func MarkAudit(path string) AuditMark {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return AuditMark(st.Size())
}

// AuditEvent is what the load programs read of one audit event (audit.k8s.io/v1 Event,
// level Metadata).
type AuditEvent struct {
	Stage     string
	Verb      string
	User      struct{ Username string }
	ObjectRef struct{ Resource, Namespace, Name string }
	// ResponseStatus is absent on events logged before the response.
	ResponseStatus *struct{ Code int }
	// Annotations hold the admission webhooks' audit annotations, keyed
	// "<webhook entry name>/<key>".
	Annotations map[string]string
	// StageTimestamp is when the event's stage was reached (ResponseComplete: when the
	// response was sent).
	StageTimestamp time.Time
}

// ReadAudit calls f with every event in the audit log after mark, in the order logged.
func ReadAudit(path string, mark AuditMark, f func(ev *AuditEvent)) error {
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	if _, err := file.Seek(int64(mark), io.SeekStart); err != nil {
		return err
	}
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev AuditEvent
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			f(&ev)
		}
	}
	return sc.Err()
}

// Requests counts the requests user made after mark, by "verb resource".
func Requests(path string, mark AuditMark, user string) (map[string]int, error) {
	out := map[string]int{}
	err := ReadAudit(path, mark, func(ev *AuditEvent) {
		if ev.User.Username != user {
			return
		}
		// One event per request: watches end late, so count them when they start.
		if ev.Stage != "ResponseComplete" && !(ev.Verb == "watch" && ev.Stage == "ResponseStarted") {
			return
		}
		out[ev.Verb+" "+ev.ObjectRef.Resource]++
	})
	return out, err
}

// FormatRequests lists counts by "verb resource", sorted: "3 get configmaps, 1 patch
// deployments".
func FormatRequests(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	return strings.Join(parts, ", ")
}
