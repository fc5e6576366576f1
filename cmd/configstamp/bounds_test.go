package main

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/go-logr/logr"
)

func TestSetMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	for _, tc := range []struct {
		name, limit, gomemlimit string
		want                    int64
	}{
		{"80% of the container's", "268435456", "", 214748360},
		{"GOMEMLIMIT wins", "268435456", "100MiB", math.MaxInt64},
		{"no limit given", "", "", math.MaxInt64},
		{"not a number", "256Mi", "", math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetMemoryLimit(math.MaxInt64)
			t.Setenv(memoryLimitEnv, tc.limit)
			t.Setenv("GOMEMLIMIT", tc.gomemlimit)
			setMemoryLimit(logr.Discard())
			if got := debug.SetMemoryLimit(-1); got != tc.want {
				t.Fatalf("memory limit %d, want %d", got, tc.want)
			}
		})
	}
}

func TestSetGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	for _, tc := range []struct {
		role, gogc string
		want       int
	}{
		{roleWatcher, "", watcherGCPercent},
		{roleWatcher, "80", 100}, // GOGC set: the runtime took it (here: left at 100)
		{roleWebhook, "", webhookGCPercent},
		{roleAll, "", 100},
	} {
		t.Run(tc.role+" GOGC="+tc.gogc, func(t *testing.T) {
			debug.SetGCPercent(100)
			t.Setenv("GOGC", tc.gogc)
			setGCPercent(tc.role, logr.Discard())
			if got := debug.SetGCPercent(100); got != tc.want {
				t.Fatalf("GOGC %d, want %d", got, tc.want)
			}
		})
	}
}
