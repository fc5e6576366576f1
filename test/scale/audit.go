package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/configstamp/configstamp/test/cluster"
)

// auditMark is a position in the API server's audit log.
type auditMark int64

func markAudit(path string) auditMark {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return auditMark(st.Size())
}

// requestsSince counts configstamp's requests after mark, by "verb resource".
func requestsSince(path string, mark auditMark) (map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(int64(mark), io.SeekStart); err != nil {
		return nil, err
	}
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev struct {
			Stage     string
			Verb      string
			User      struct{ Username string }
			ObjectRef struct{ Resource string }
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.User.Username != cluster.ConfigstampUser {
			continue
		}
		// One event per request: watches end late, so count them when they start.
		if ev.Stage != "ResponseComplete" && !(ev.Verb == "watch" && ev.Stage == "ResponseStarted") {
			continue
		}
		out[ev.Verb+" "+ev.ObjectRef.Resource]++
	}
	return out, sc.Err()
}

func formatRequests(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	return strings.Join(parts, ", ")
}
