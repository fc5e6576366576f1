package webhook

import (
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
)

// malformedLines lets through at most one line about a malformed review (one the API
// server never sends: no uid, or an object that does not decode as its kind) in 10 s,
// after a burst of 5, so a flood of them cannot fill the log at Error level; the metric
// (result "rejected") counts every one. Only reviews inside the scope are logged at all.
var malformedLines = rate.NewLimiter(rate.Every(10*time.Second), 5)

func malformed(log logr.Logger, err error, msg string, kv ...any) {
	if malformedLines.Allow() {
		log.Error(err, msg, kv...)
	}
}
