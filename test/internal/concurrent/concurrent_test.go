package concurrent

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// recorder is a testing.TB that records failures and never stops a goroutine: what
// stops one is Run's doing.
type recorder struct {
	testing.TB
	mu      sync.Mutex
	errors  []string
	failed  bool
	failNow int
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) { r.Error(fmt.Sprintf(format, args...)) }

func (r *recorder) Error(args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprint(args...))
	r.failed = true
}

func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...); r.FailNow() }

func (r *recorder) Fail() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
}

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *recorder) FailNow() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	r.failNow++
}

// TestRun: a Fatal ends its own check only, a panic is reported as a failure, the
// other checks run to their end, and Run stops the test once all are done.
func TestRun(t *testing.T) {
	rec := &recorder{}
	var pastFatal, done bool
	fatal := make(chan struct{})
	Run(rec, func(t testing.TB) {
		close(fatal)
		t.Fatalf("boom %d", 1)
		pastFatal = true
	}, func(testing.TB) {
		<-fatal
		done = true
	}, func(testing.TB) {
		panic("bad input")
	})
	if pastFatal {
		t.Error("a check ran past its Fatalf")
	}
	if !done {
		t.Error("a check was not run to its end")
	}
	all := strings.Join(rec.errors, "\n")
	if !strings.Contains(all, "boom 1") || !strings.Contains(all, "panic: bad input") {
		t.Errorf("reported %q, want the Fatalf and the panic", all)
	}
	if rec.failNow != 1 {
		t.Errorf("FailNow called %d times on the test, want once, from Run", rec.failNow)
	}

	ok := &recorder{}
	Run(ok, func(testing.TB) {}, func(testing.TB) {})
	if ok.Failed() || ok.failNow != 0 {
		t.Errorf("checks that pass: failed %v, FailNow %d", ok.Failed(), ok.failNow)
	}
}
