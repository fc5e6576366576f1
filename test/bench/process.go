package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// RSS is the resident set size of a process, from /proc.
func RSS(pid int) (int64, error) { return Status(pid, "VmRSS") }

// Status reads a memory field of /proc/PID/status (VmRSS, RssAnon, RssFile, VmHWM) in bytes.
func Status(pid int, field string) (int64, error) {
	v, err := Statuses(pid, field)
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

// Statuses reads memory fields of /proc/PID/status in bytes from one read, so that
// parts (RssAnon, RssFile) add up to the whole (VmRSS) of the same moment.
func Statuses(pid int, fields ...string) ([]int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(fields))
	for i, field := range fields {
		found := false
		for _, line := range strings.Split(string(raw), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == field+":" {
				kb, err := strconv.ParseInt(f[1], 10, 64)
				if err != nil {
					return nil, err
				}
				out[i], found = kb<<10, true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("no %s", field)
		}
	}
	return out, nil
}

// OpenFiles is how many file descriptors a process holds open, from /proc.
func OpenFiles(pid int) (int, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(fds), err
}

// MiB formats a byte count.
func MiB(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
