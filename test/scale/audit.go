package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/configstamp/configstamp/test/bench"
	"github.com/configstamp/configstamp/test/cluster"
)

var markAudit = bench.MarkAudit

// requestsSince counts configstamp's requests after mark, by "verb resource".
func requestsSince(path string, mark bench.AuditMark) (map[string]int, error) {
	out := map[string]int{}
	err := bench.ReadAudit(path, mark, func(ev *bench.AuditEvent) {
		if ev.User.Username != cluster.ConfigstampUser {
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
