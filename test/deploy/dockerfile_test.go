package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/configstamp/configstamp/test/cluster"
)

// TestDockerfile checks what can be checked without a Docker engine: two stages, a
// static build cross-compiled on the builder's platform for the target's, the distroless
// nonroot base and user, and that every package the binary is built from is copied into
// the build stage.
func TestDockerfile(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var from, copies []string
	var user string
	static, cross, buildOnBuilder := false, false, false
	versioned := strings.Contains(string(raw), "-X main.version=${VERSION}") // in the RUN's continued lines
	args := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			if strings.HasPrefix(f[1], "--platform=") {
				buildOnBuilder = buildOnBuilder || len(from) == 0 && f[1] == "--platform=$BUILDPLATFORM"
				f = append(f[:1], f[2:]...)
			}
			from = append(from, f[1])
		case "ARG":
			for _, a := range f[1:] {
				args[a] = true
			}
		case "COPY":
			if !strings.HasPrefix(f[1], "--from") {
				copies = append(copies, f[1:len(f)-1]...)
			}
		case "USER":
			user = f[1]
		case "RUN":
			static = static || strings.Contains(line, "CGO_ENABLED=0")
			cross = cross || strings.Contains(line, "GOOS=${TARGETOS} GOARCH=${TARGETARCH}")
		}
	}
	if len(from) != 2 || from[1] != "gcr.io/distroless/static:nonroot" {
		t.Errorf("stages %v: want a build stage and gcr.io/distroless/static:nonroot", from)
	}
	if user != "65532:65532" {
		t.Errorf("USER %q, want 65532:65532", user)
	}
	if !static {
		t.Error("the binary is not built with CGO_ENABLED=0")
	}
	// BuildKit sets TARGETOS and TARGETARCH only where they are declared without a value.
	if !buildOnBuilder || !cross || !args["TARGETOS"] || !args["TARGETARCH"] {
		t.Errorf("not cross-compiled: want FROM --platform=$BUILDPLATFORM for the build stage (%v), ARG TARGETOS TARGETARCH (%v), GOOS=${TARGETOS} GOARCH=${TARGETARCH} (%v)",
			buildOnBuilder, args["TARGETOS"] && args["TARGETARCH"], cross)
	}
	if !versioned || !args["VERSION=dev"] {
		t.Errorf("the image's version: want ARG VERSION=dev (%v) passed as -X main.version=${VERSION} (%v)", args["VERSION=dev"], versioned)
	}
	root := cluster.RepoRoot()
	list := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}", "./cmd/configstamp")
	list.Dir = root
	out, err := list.Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range strings.Fields(string(out)) {
		rel, _ := filepath.Rel(root, dir)
		top := strings.Split(rel, string(filepath.Separator))[0] + "/"
		found := false
		for _, c := range copies {
			found = found || c == top
		}
		if !found {
			t.Errorf("package %s is not copied into the build stage (COPY %s)", rel, top)
		}
	}
}

// TestVersionFromMakefile: `make build VERSION=...` sets the version that
// `configstamp --version` prints (the Dockerfile passes its VERSION build argument the
// same way, checked above).
func TestVersionFromMakefile(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("make", "-s", "build", "VERSION=v9.9.9-test", "BIN="+dir)
	cmd.Dir = cluster.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(dir, "configstamp"), "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("--version: %v\n%s", err, out)
	}
	if !strings.HasPrefix(string(out), "configstamp v9.9.9-test ") {
		t.Fatalf("--version printed %q, want the version set at build time", out)
	}
}
