package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// dockerfile is what the Dockerfile's final image is made of, its ARGs' defaults
// replaced by the test's inputs.
type dockerfile struct {
	user       string
	entrypoint []string
	labels     map[string]string
	// build is the -ldflags of the build stage's go build, static and -trimpath.
	ldflags      string
	static, trim bool
}

// readDockerfile parses the instructions of the Dockerfile that say what the image is;
// a line ending in a backslash continues on the next.
func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.NewReplacer("${VERSION}", testVersion, "${REVISION}", testRevision,
		"${CREATED}", time.Unix(testEpoch, 0).UTC().Format(time.RFC3339))
	d := dockerfile{labels: map[string]string{}}
	text := strings.ReplaceAll(string(raw), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		instr, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest = args.Replace(strings.TrimSpace(rest))
		switch instr {
		case "USER":
			d.user = rest
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &d.entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT %s: %v", rest, err)
			}
		case "LABEL":
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				d.labels[k] = v
			}
		case "RUN":
			if !strings.Contains(rest, "go build") {
				continue
			}
			d.static = strings.Contains(rest, "CGO_ENABLED=0")
			d.trim = slices.Contains(strings.Fields(rest), "-trimpath")
			if _, after, ok := strings.Cut(rest, `-ldflags="`); ok {
				d.ldflags, _, _ = strings.Cut(after, `"`)
			}
		}
	}
	return d
}

// TestDockerfileEquivalent: make image is the source of truth; the Dockerfile, for
// those who build with Docker, gives the same user, entrypoint and labels, and builds
// the binary static and -trimpath with the -ldflags make image uses (TestImage checks
// their effects in the image's binaries: static, stripped, the version).
func TestDockerfileEquivalent(t *testing.T) {
	d := readDockerfile(t)
	o := Options{Version: testVersion, Revision: testRevision, Source: "https://github.com/configstamp/configstamp", Created: time.Unix(testEpoch, 0)}
	if d.user != user {
		t.Errorf("Dockerfile USER %q, make image %q", d.user, user)
	}
	if !slices.Equal(d.entrypoint, []string{entrypoint}) {
		t.Errorf("Dockerfile ENTRYPOINT %q, make image [%q]", d.entrypoint, entrypoint)
	}
	if !reflect.DeepEqual(d.labels, o.Labels()) {
		t.Errorf("Dockerfile LABELs %v, make image %v", d.labels, o.Labels())
	}
	cmd := exec.Command("make", "-n", "image", "VERSION="+testVersion)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make -n image: %v", err)
	}
	recipe := string(out)
	_, ldflags, _ := strings.Cut(recipe, `-ldflags "`)
	ldflags, _, _ = strings.Cut(ldflags, `"`)
	if !d.static || !d.trim || d.ldflags != ldflags || !strings.Contains(recipe, "CGO_ENABLED=0") || !strings.Contains(recipe, "-trimpath") {
		t.Errorf("Dockerfile's go build: CGO_ENABLED=0 %v, -trimpath %v, -ldflags %q; make image's: %q, both static and -trimpath", d.static, d.trim, d.ldflags, ldflags)
	}
}
