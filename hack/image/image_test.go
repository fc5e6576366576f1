package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"debug/buildinfo"
	"debug/elf"
	"encoding/pem"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The inputs the test gives make image; the image must carry exactly these.
const (
	testVersion  = "v0.0.0-imagetest"
	testRevision = "0123456789abcdef0123456789abcdef01234567"
	testEpoch    = 1764892800 // 2025-12-05T00:00:00Z
)

var root = func() string { r, _ := filepath.Abs("../.."); return r }()

// makeIn runs a make target of the repository with the test's inputs, writing into bin.
func makeIn(t *testing.T, bin string, target string) {
	t.Helper()
	cmd := exec.Command("make", "-s", target, "BIN="+bin, "VERSION="+testVersion, "REVISION="+testRevision,
		"SOURCE_DATE_EPOCH="+strconv.Itoa(testEpoch))
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make %s: %v\n%s", target, err, out)
	}
}

// imageIndex opens the image index make image wrote as an OCI layout.
func imageIndex(t *testing.T, dir string) v1.ImageIndex {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != testVersion {
		t.Fatalf("the layout holds %+v, want one index named %s", m.Manifests, testVersion)
	}
	idx, err := top.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

// TestImage builds the image as make image does (twice, into two directories) and
// opens it: the same digests both times, both architectures, the config the Dockerfile
// gives (user, entrypoint, labels), the base's files, and in each a static binary of
// the platform, built as the Dockerfile builds it, that reports what make build's does.
func TestImage(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	makeIn(t, a, "image")
	makeIn(t, b, "image")
	idx := imageIndex(t, filepath.Join(a, "image"))
	da, _ := idx.Digest()
	db, _ := imageIndex(t, filepath.Join(b, "image")).Digest()
	if da != db {
		t.Errorf("not reproducible: two builds of the same inputs gave %s and %s", da, db)
	}
	if mt, _ := idx.MediaType(); mt != types.OCIImageIndex {
		t.Errorf("index media type %s, want %s", mt, types.OCIImageIndex)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m.Annotations, wantLabels()) {
		t.Errorf("index annotations %v, want %v", m.Annotations, wantLabels())
	}
	var platforms []string
	for _, d := range m.Manifests {
		if d.Platform == nil {
			t.Fatalf("manifest %s has no platform", d.Digest)
		}
		platform := d.Platform.OS + "/" + d.Platform.Architecture
		platforms = append(platforms, platform)
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(strings.ReplaceAll(platform, "/", "_"), func(t *testing.T) { checkImage(t, img, d.Platform) })
	}
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(platforms, want) {
		t.Errorf("platforms %v, want %v", platforms, want)
	}
}

func wantLabels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.version":  testVersion,
		"org.opencontainers.image.source":   "https://github.com/configstamp/configstamp",
		"org.opencontainers.image.revision": testRevision,
		"org.opencontainers.image.created":  time.Unix(testEpoch, 0).UTC().Format(time.RFC3339),
	}
}

func checkImage(t *testing.T, img v1.Image, platform *v1.Platform) {
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s, want %s", mt, types.OCIManifestSchema1)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != platform.OS || cf.Architecture != platform.Architecture {
		t.Errorf("config says %s/%s, the index %s/%s", cf.OS, cf.Architecture, platform.OS, platform.Architecture)
	}
	if !cf.Created.Equal(time.Unix(testEpoch, 0)) {
		t.Errorf("created %v, want SOURCE_DATE_EPOCH %d", cf.Created, testEpoch)
	}
	if cf.Config.User != "65532:65532" || !slices.Equal(cf.Config.Entrypoint, []string{"/configstamp"}) {
		t.Errorf("user %q entrypoint %q, want 65532:65532 [/configstamp]", cf.Config.User, cf.Config.Entrypoint)
	}
	if !reflect.DeepEqual(cf.Config.Labels, wantLabels()) {
		t.Errorf("labels %v, want %v", cf.Config.Labels, wantLabels())
	}
	files := extract(t, img)
	// Nothing else: no shell, no package manager, nothing a base would bring unseen.
	names := slices.Sorted(maps.Keys(files))
	if want := []string{"configstamp", "etc", "etc/group", "etc/passwd", "etc/ssl", "etc/ssl/certs",
		"etc/ssl/certs/ca-certificates.crt", "home", "home/nonroot", "tmp"}; !slices.Equal(names, want) {
		t.Errorf("the image holds %q, want exactly %q", names, want)
	}
	for name, want := range map[string]struct {
		mode     int64
		uid, gid int
	}{
		"configstamp": {0o755, 0, 0}, "etc/passwd": {0o644, 0, 0}, "etc/group": {0o644, 0, 0},
		"etc/ssl/certs/ca-certificates.crt": {0o644, 0, 0}, "home/nonroot": {0o700, 65532, 65532}, "tmp": {0o1777, 0, 0},
	} {
		h := files[name].h
		if h == nil {
			t.Errorf("no /%s in the image", name)
			continue
		}
		if h.Mode != want.mode || h.Uid != want.uid || h.Gid != want.gid || !h.ModTime.Equal(time.Unix(testEpoch, 0)) {
			t.Errorf("/%s: mode %o uid %d gid %d time %v, want %o %d %d %v", name, h.Mode, h.Uid, h.Gid, h.ModTime, want.mode, want.uid, want.gid, time.Unix(testEpoch, 0).UTC())
		}
	}
	if !strings.Contains(string(files["etc/passwd"].body), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd names no nonroot 65532:\n%s", files["etc/passwd"].body)
	}
	checkCABundle(t, files["etc/ssl/certs/ca-certificates.crt"].body)
	checkBinary(t, files["configstamp"].body, platform)
}

// checkCABundle: the pinned Mozilla roots (not the build host's bundle, which would make
// the digest depend on the machine), usable: they parse, Let's Encrypt's root among them.
func checkCABundle(t *testing.T, ca []byte) {
	t.Helper()
	if !bytes.Equal(ca, mozillaRoots()) {
		t.Errorf("the CA bundle (%d bytes) is not the pinned Mozilla roots (%d bytes)", len(ca), len(mozillaRoots()))
	}
	var subjects []string
	for rest := ca; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatalf("the CA bundle: %v", err)
		}
		subjects = append(subjects, c.Subject.CommonName)
	}
	if len(subjects) < 100 || !slices.Contains(subjects, "ISRG Root X1") {
		t.Errorf("the CA bundle holds %d certificates (want over 100, ISRG Root X1 among them)", len(subjects))
	}
}

type entry struct {
	h    *tar.Header
	body []byte
}

// extract reads the image's flattened filesystem (go-containerregistry's view of what a
// runtime unpacks).
func extract(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	files := map[string]entry{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimSuffix(h.Name, "/")] = entry{h, body}
	}
}

// checkBinary: an ELF of the platform's machine, static (no interpreter, no shared
// library), built with the Dockerfile's flags; the host's runs and prints what make
// build's binary prints for --version.
func checkBinary(t *testing.T, binary []byte, platform *v1.Platform) {
	f, err := elf.NewFile(bytes.NewReader(binary))
	if err != nil {
		t.Fatalf("/configstamp is not an ELF: %v", err)
	}
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[platform.Architecture]
	if f.Machine != machine {
		t.Errorf("ELF machine %v, want %v", f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("not static: program header %v", p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("not static: needs %v", libs)
	}
	path := filepath.Join(t.TempDir(), "configstamp")
	if err := os.WriteFile(path, binary, 0o755); err != nil {
		t.Fatal(err)
	}
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	// -trimpath leaves -ldflags out of the build info: -s -w are seen as no symbol
	// table and no DWARF, -X main.version as the version in the binary.
	for k, v := range map[string]string{"CGO_ENABLED": "0", "GOOS": platform.OS, "GOARCH": platform.Architecture, "-trimpath": "true"} {
		if settings[k] != v {
			t.Errorf("built with %s=%q, want %q (the Dockerfile's build)", k, settings[k], v)
		}
	}
	if f.Section(".symtab") != nil || f.Section(".debug_info") != nil {
		t.Error("not stripped (-ldflags -s -w): a symbol table or DWARF")
	}
	if !bytes.Contains(binary, []byte(testVersion)) {
		t.Errorf("the binary holds no %s (-X main.version)", testVersion)
	}
	if platform.OS != runtime.GOOS || platform.Architecture != runtime.GOARCH {
		return
	}
	got, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("/configstamp --version: %v\n%s", err, got)
	}
	dir := t.TempDir()
	makeIn(t, dir, "build")
	built, err := exec.Command(filepath.Join(dir, "configstamp"), "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("make build's configstamp --version: %v\n%s", err, built)
	}
	if string(got) != string(built) || !strings.HasPrefix(string(got), "configstamp "+testVersion+" ") {
		t.Errorf("the image's binary says %q, make build's %q (want configstamp %s ...)", got, built, testVersion)
	}
}
