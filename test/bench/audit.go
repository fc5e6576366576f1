package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"
)

// AuditMark is a position in the API server's audit log: a byte offset into one file
// (its inode). Reading from a mark fails if the log was replaced (rotated) or shrank
// since: byte offsets into another file would skip or repeat events silently.
type AuditMark struct {
	offset int64
	inode  uint64
	err    error // the log could not be stat'ed when marked
}

// MarkAudit is the audit log's current end: events after it are the ones to come.
func MarkAudit(path string) AuditMark {
	st, err := os.Stat(path)
	if err != nil {
		return AuditMark{err: fmt.Errorf("marking the audit log: %w", err)}
	}
	return AuditMark{offset: st.Size(), inode: inode(st)}
}

// loggedLines splits like bufio.ScanLines, but only newline-terminated lines: at the end
// of the log, a line without its newline is one the API server is writing.
func loggedLines(data []byte, _ bool) (int, []byte, error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, data[:i], nil
	}
	return 0, nil, nil
}

func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// AuditEvent is what the load programs read of one audit event (audit.k8s.io/v1 Event;
// level Metadata, or Request where the cluster's policy asks for the body).
type AuditEvent struct {
	Stage     string
	Verb      string
	User      struct{ Username string }
	UserAgent string
	ObjectRef struct{ Resource, Namespace, Name string }
	// ResponseStatus is absent on events logged before the response.
	ResponseStatus *struct{ Code int }
	// Annotations hold the admission webhooks' audit annotations, keyed
	// "<webhook entry name>/<key>", and the API server's own about the webhooks it
	// called ("mutation.webhook.admission.k8s.io/round_R_index_I", with a
	// "failed-open." prefix for one that failed open).
	Annotations map[string]string
	// RequestObject is the request's body, logged at level Request and above (for a
	// PATCH: the patch as sent).
	RequestObject json.RawMessage
	// StageTimestamp is when the event's stage was reached (ResponseComplete: when the
	// response was sent); RequestReceivedTimestamp when the API server received it.
	StageTimestamp           time.Time
	RequestReceivedTimestamp time.Time
}

// ReadAudit calls f with every event in the audit log after mark, in the order logged.
// It fails if the file at path is no longer the one marked, or is shorter than the mark,
// or was replaced while being read. A line that does not decode as an event is skipped;
// ReadAuditStrict fails on one instead. Neither reads a last line without its newline:
// the API server is writing it (it writes whole lines), and its event comes after this
// read.
func ReadAudit(path string, mark AuditMark, f func(ev *AuditEvent)) error {
	return readAudit(path, mark, false, f)
}

// ReadAuditStrict is ReadAudit failing on a logged line (newline-terminated) that does
// not decode as an event: for a reader asserting that no event of some kind was logged,
// a line skipped could be that event.
func ReadAuditStrict(path string, mark AuditMark, f func(ev *AuditEvent)) error {
	return readAudit(path, mark, true, f)
}

func readAudit(path string, mark AuditMark, strict bool, f func(ev *AuditEvent)) error {
	if mark.err != nil {
		return mark.err
	}
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return err
	}
	if inode(st) != mark.inode {
		return fmt.Errorf("audit log %s replaced since it was marked (inode %d, was %d): rotated?", path, inode(st), mark.inode)
	}
	if st.Size() < mark.offset {
		return fmt.Errorf("audit log %s shrank since it was marked (%d bytes, mark at %d)", path, st.Size(), mark.offset)
	}
	if _, err := file.Seek(mark.offset, io.SeekStart); err != nil {
		return err
	}
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	sc.Split(loggedLines)
	offset := mark.offset
	for sc.Scan() {
		var ev AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err == nil {
			f(&ev)
		} else if strict {
			line := sc.Text()
			if len(line) > 200 {
				line = line[:200] + "..."
			}
			return fmt.Errorf("audit log %s at byte %d: %w: %q", path, offset, err, line)
		}
		offset += int64(len(sc.Bytes())) + 1
	}
	if err := sc.Err(); err != nil {
		return err
	}
	now, err := os.Stat(path)
	if err != nil {
		return err
	}
	if inode(now) != mark.inode {
		return fmt.Errorf("audit log %s replaced while it was read (inode %d, was %d): rotated?", path, inode(now), mark.inode)
	}
	return nil
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
