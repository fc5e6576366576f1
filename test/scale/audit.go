package main

import (
	"github.com/configstamp/configstamp/test/bench"
	"github.com/configstamp/configstamp/test/cluster"
)

// Shared with test/soak: see test/bench.
var (
	markAudit      = bench.MarkAudit
	formatRequests = bench.FormatRequests
)

// requestsSince counts configstamp's requests after mark, by "verb resource".
func requestsSince(path string, mark bench.AuditMark) (map[string]int, error) {
	return bench.Requests(path, mark, cluster.ConfigstampUser)
}
