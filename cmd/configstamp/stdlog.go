package main

import (
	"errors"
	"log"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
)

// connNoise starts the lines net/http (and its HTTP/2 server) log about one client
// connection that went wrong before a request: a port scanner's connect-and-close, a
// client that hung up in the handshake, one without the client certificate
// --webhook-client-ca-file asks for. Anyone who reaches a port can make them, as fast
// as they can connect.
var connNoise = []string{"http: TLS handshake error from ", "http2: server: error reading preface from client ", "http2: server connection error from "}

// certFailure marks the connection-noise lines of a client certificate that did not
// verify (or was missing) while --webhook-client-ca-file asks for one: after a client-CA
// rotation that left out the API server's CA, these are every admission failing open.
// They are logged at Error, rate-limited apart from the rest, so a port scanner's
// connect-and-close cannot hide them.
var certFailure = []string{"failed to verify certificate", "didn't provide a certificate", "bad certificate", "unknown authority"}

// stdLog takes the lines of the standard library's logger, where net/http's servers
// (the webhook's, the metrics' and the probes', which controller-runtime makes without
// an ErrorLog) write, into configstamp's log. Connection noise (connNoise) is let through
// a few lines at first, then one per noiseInterval with the count held back, and so are
// certificate failures among them (certFailure), apart and at Error; everything else (a
// handler panic, an Accept error, a line it does not know) is logged at Error,
// unthrottled.
type stdLog struct {
	log         logr.Logger
	noise, cert limited
}

// limited lets a few lines through, then one per interval, counting those held back.
type limited struct {
	sometimes rate.Sometimes
	// held counts the lines not logged since the last one that was.
	held atomic.Int64
}

// do runs logLine, given the count held back since, if this line is let through.
func (l *limited) do(logLine func(heldBack int64)) {
	logged := false
	l.sometimes.Do(func() {
		logged = true
		logLine(l.held.Swap(0))
	})
	if !logged {
		l.held.Add(1)
	}
}

// noiseInterval spaces the connection-noise lines after the first few; certInterval the
// certificate failures.
const (
	noiseInterval = time.Minute
	certInterval  = 10 * time.Second
)

func newStdLog(l logr.Logger) *stdLog {
	return &stdLog{log: l,
		noise: limited{sometimes: rate.Sometimes{First: 3, Interval: noiseInterval}},
		cert:  limited{sometimes: rate.Sometimes{First: 3, Interval: certInterval}}}
}

// install makes the standard library's logger write through s.
func (s *stdLog) install() {
	log.SetFlags(0)
	log.SetPrefix("")
	log.SetOutput(s)
}

// Write takes one line of the standard library's logger (one call per line).
func (s *stdLog) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	for _, prefix := range connNoise {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		if containsAny(line, certFailure) {
			s.cert.do(func(held int64) {
				s.log.Error(errors.New(line), "A client certificate did not verify: if this is the API server, every admission fails open (check --webhook-client-ca-file holds the CA of its client certificate); lines like this are rate-limited",
					"heldBack", held, "interval", certInterval.String())
			})
		} else {
			s.noise.do(func(held int64) {
				s.log.Info("A client connection failed (lines like this are rate-limited)", "line", line, "heldBack", held, "interval", noiseInterval.String())
			})
		}
		return len(p), nil
	}
	s.log.Error(errors.New(line), "Logged by the Go standard library")
	return len(p), nil
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
