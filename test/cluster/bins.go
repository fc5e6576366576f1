package cluster

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// BinDirEnv names the environment variable that points at prebuilt binaries (the
// Makefile sets it from hack/tools.sh).
const BinDirEnv = "CONFIGSTAMP_BIN_DIR"

// BinDir returns the directory holding the control-plane binaries: $CONFIGSTAMP_BIN_DIR
// when set, else what hack/tools.sh prints after building any that are missing (from the
// Go module proxy, cached outside the clone; minutes on a cold cache).
func BinDir(controllers bool) (string, error) {
	if d := os.Getenv(BinDirEnv); d != "" {
		return d, nil
	}
	set := "control-plane"
	if controllers {
		set = "e2e"
	}
	cmd := exec.Command("bash", filepath.Join(RepoRoot(), "hack", "tools.sh"), set)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/tools.sh %s: %w", set, err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return lines[len(lines)-1], nil
}

// RepoRoot is the root of the configstamp checkout.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}
