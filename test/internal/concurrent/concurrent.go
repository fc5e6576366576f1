// Package concurrent runs a test's checks at once, each in its own goroutine, with
// failures reported as the testing package requires.
package concurrent

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
)

// Run runs fs at once and waits for all; then, if t failed, it stops t. Each f gets its
// own T: its Fatal (and FailNow, Skip) marks t failed and ends that f only (testing's
// own FailNow may be called only from the test's goroutine). A panic in an f fails t
// with its stack instead of ending the test binary (and every other test's report).
func Run(t testing.TB, fs ...func(t testing.TB)) {
	t.Helper()
	var wg sync.WaitGroup
	for _, f := range fs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("panic: %v\n%s", r, debug.Stack())
				}
			}()
			f(goroutineT{t})
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// goroutineT is a test's T for one of its goroutines: what would end the test ends the
// goroutine, the test marked failed.
type goroutineT struct{ testing.TB }

func (g goroutineT) FailNow() {
	g.Fail()
	runtime.Goexit()
}

func (g goroutineT) Fatal(args ...any) {
	g.Helper()
	g.Error(args...)
	runtime.Goexit()
}

func (g goroutineT) Fatalf(format string, args ...any) {
	g.Helper()
	g.Errorf(format, args...)
	runtime.Goexit()
}

// SkipNow and the Skips fail: one check cannot skip the others.
func (g goroutineT) SkipNow() { g.Fatal("skipped in a goroutine") }

func (g goroutineT) Skip(args ...any) {
	g.Helper()
	g.Fatal(append([]any{"skipped in a goroutine:"}, args...)...)
}

func (g goroutineT) Skipf(format string, args ...any) {
	g.Helper()
	g.Fatal("skipped in a goroutine: " + fmt.Sprintf(format, args...))
}
