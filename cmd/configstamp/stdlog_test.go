package main

import (
	"log"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
)

// TestStdLog: connection noise from net/http is let through a few lines, then held
// back (counted); a panic, an Accept error and a line not known are each logged at
// Error.
func TestStdLog(t *testing.T) {
	var lines []string
	s := newStdLog(funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{}))
	l := log.New(s, "", 0)
	for i := range 200 {
		l.Printf("http: TLS handshake error from 127.0.0.1:%d: EOF", 40000+i)
	}
	l.Printf("http2: server: error reading preface from client 127.0.0.1:1: EOF")
	noise := len(lines)
	if noise != 3 {
		t.Errorf("201 noise lines gave %d log lines, want the first 3", noise)
	}
	if s.noise.held.Load() != 198 {
		t.Errorf("%d held back, want 198", s.noise.held.Load())
	}
	for _, line := range []string{
		"http: panic serving 127.0.0.1:1: boom\ngoroutine 7 [running]:",
		"http: Accept error: accept tcp: too many open files; retrying in 5ms",
		"something new",
	} {
		l.Print(line)
	}
	errs := lines[noise:]
	if len(errs) != 3 {
		t.Fatalf("3 lines that are not noise gave %d log lines: %v", len(errs), errs)
	}
	for i, want := range []string{"panic serving", "Accept error", "something new"} {
		if !strings.Contains(errs[i], want) || !strings.Contains(errs[i], `"error"`) {
			t.Errorf("line %d: %s, want an error with %q", i, errs[i], want)
		}
	}
}

// A client certificate that does not verify (after a client-CA rotation that left out the
// API server's CA, every admission) is logged at Error, apart from the connect-and-close
// noise that could otherwise hide it.
func TestStdLogCertificateFailures(t *testing.T) {
	var lines []string
	s := newStdLog(funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{}))
	l := log.New(s, "", 0)
	for i := range 100 {
		l.Printf("http: TLS handshake error from 127.0.0.1:%d: EOF", 40000+i)
	}
	noise := len(lines)
	l.Printf("http: TLS handshake error from 10.0.0.1:443: tls: failed to verify certificate: x509: certificate signed by unknown authority")
	if len(lines) != noise+1 || !strings.Contains(lines[noise], `"error"`) || !strings.Contains(lines[noise], "unknown authority") {
		t.Fatalf("after %d noise lines, a certificate failure gave %v", noise, lines[noise:])
	}
}
