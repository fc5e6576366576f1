// Command image writes configstamp's multi-arch OCI image (an image index of one image
// per platform) as an OCI layout, without a Docker engine and without pulling a base:
// the image is built from scratch with go-containerregistry. `make image` runs it with
// the static binaries it cross-compiled; the Dockerfile builds an equivalent image with
// Docker (TestDockerfileEquivalent compares them).
//
// Each image has two layers: the base (what gcr.io/distroless/static:nonroot gives a
// static binary: a CA bundle, by default Mozilla's roots as pinned in go.sum rather than
// the build host's; /etc/passwd and /etc/group naming root, nobody and nonroot 65532;
// /home/nonroot; /tmp) and the binary at /configstamp. Every time in it (files, config,
// history) is -created, so the same inputs give the same digests on any machine.
//
// This module has its own go.mod, so go-containerregistry stays out of configstamp's.
package main

import (
	"archive/tar"
	"bytes"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The user, entrypoint and environment of the image: the Dockerfile's USER and
// ENTRYPOINT, and what its distroless base sets.
const (
	user       = "65532:65532"
	entrypoint = "/configstamp"
	workingDir = "/home/nonroot"
	caPath     = "/etc/ssl/certs/ca-certificates.crt"
)

var env = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"SSL_CERT_FILE=" + caPath,
}

// Options are what one image index is made of.
type Options struct {
	Version  string
	Revision string
	Source   string
	Created  time.Time
	CABundle []byte
	// Binaries maps a platform ("linux/amd64") to its static binary.
	Binaries map[string][]byte
	// Platforms lists Binaries' keys in the index's order.
	Platforms []string
}

// Labels are the image's OCI labels (org.opencontainers.image.*): the Dockerfile's
// version and source, and the revision and creation time.
func (o Options) Labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.version":  o.Version,
		"org.opencontainers.image.source":   o.Source,
		"org.opencontainers.image.revision": o.Revision,
		"org.opencontainers.image.created":  o.Created.UTC().Format(time.RFC3339),
	}
}

func main() {
	var o Options
	var out, ca, epoch string
	var bins multiFlag
	flag.StringVar(&out, "out", "bin/image", "the OCI layout to write (replaced)")
	flag.StringVar(&o.Version, "version", "dev", "the version (label, layout ref name)")
	flag.StringVar(&o.Revision, "revision", "unknown", "the source revision (label)")
	flag.StringVar(&o.Source, "source", "https://github.com/configstamp/configstamp", "the source repository (label)")
	flag.StringVar(&epoch, "created", "0", "the image's time, in seconds since the epoch (SOURCE_DATE_EPOCH)")
	flag.StringVar(&ca, "ca-bundle", "", "the PEM bundle of CA certificates to ship (default: Mozilla's, from golang.org/x/crypto/x509roots/fallback)")
	flag.Var(&bins, "binary", "PLATFORM=PATH of a static configstamp binary, e.g. linux/arm64=bin/linux_arm64/configstamp (repeat)")
	flag.Parse()
	if err := run(o, out, ca, epoch, bins); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(o Options, out, ca, epoch string, bins []string) error {
	var secs int64
	if _, err := fmt.Sscan(epoch, &secs); err != nil {
		return fmt.Errorf("-created %q: %w", epoch, err)
	}
	o.Created = time.Unix(secs, 0).UTC()
	var err error
	o.CABundle = mozillaRoots()
	if ca != "" {
		if o.CABundle, err = os.ReadFile(ca); err != nil {
			return err
		}
	}
	o.Binaries = map[string][]byte{}
	for _, b := range bins {
		platform, path, ok := strings.Cut(b, "=")
		if !ok {
			return fmt.Errorf("-binary %q: want PLATFORM=PATH", b)
		}
		if o.Binaries[platform], err = os.ReadFile(path); err != nil {
			return err
		}
		o.Platforms = append(o.Platforms, platform)
	}
	idx, err := Build(o)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	p, err := layout.Write(out, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": o.Version})); err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s (%s)\n", out, d, strings.Join(o.Platforms, ", "))
	return nil
}

// Build returns the image index: one image per platform, OCI media types throughout.
func Build(o Options) (v1.ImageIndex, error) {
	if len(o.Platforms) == 0 {
		return nil, fmt.Errorf("no binary given")
	}
	base, err := layer(o.Created, baseFiles(o.CABundle))
	if err != nil {
		return nil, err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, platform := range o.Platforms {
		osName, arch, ok := strings.Cut(platform, "/")
		if !ok {
			return nil, fmt.Errorf("platform %q: want OS/ARCH", platform)
		}
		img, err := image(o, base, osName, arch, o.Binaries[platform])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", platform, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: osName, Architecture: arch}},
		})
	}
	return mutate.Annotations(idx, o.Labels()).(v1.ImageIndex), nil
}

func image(o Options, base v1.Layer, osName, arch string, binary []byte) (v1.Image, error) {
	bin, err := layer(o.Created, []file{{name: strings.TrimPrefix(entrypoint, "/"), mode: 0o755, body: binary}})
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: o.Created}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: "base: CA certificates, passwd, group, /home/nonroot, /tmp", Comment: "hack/image"}},
		mutate.Addendum{Layer: bin, History: v1.History{Created: created, CreatedBy: "COPY configstamp " + entrypoint, Comment: "hack/image"}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = osName, arch, created
	cf.Config = v1.Config{
		User:       user,
		Entrypoint: []string{entrypoint},
		Env:        env,
		WorkingDir: workingDir,
		Labels:     o.Labels(),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, o.Labels()).(v1.Image), nil
}

// file is one tar entry (a directory when dir is set).
type file struct {
	name     string
	dir      bool
	mode     int64
	uid, gid int
	body     []byte
}

// baseFiles is what distroless/static:nonroot gives a static Go binary (its tzdata and
// os-release aside).
func baseFiles(ca []byte) []file {
	passwd := "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group := "root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n"
	return []file{
		{name: "etc", dir: true, mode: 0o755},
		{name: "etc/group", mode: 0o644, body: []byte(group)},
		{name: "etc/passwd", mode: 0o644, body: []byte(passwd)},
		{name: "etc/ssl", dir: true, mode: 0o755},
		{name: "etc/ssl/certs", dir: true, mode: 0o755},
		{name: strings.TrimPrefix(caPath, "/"), mode: 0o644, body: ca},
		{name: "home", dir: true, mode: 0o755},
		{name: "home/nonroot", dir: true, mode: 0o700, uid: 65532, gid: 65532},
		{name: "tmp", dir: true, mode: 0o1777},
	}
}

// mozillaRoots is the default CA bundle: the roots of Mozilla's NSS trust store as
// golang.org/x/crypto/x509roots/fallback embeds them, in PEM, in its order. Roots NSS
// trusts only with a constraint (distrust after a date) are left out: PEM cannot carry it.
func mozillaRoots() []byte {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint == nil {
			_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})
		}
	}
	return b.Bytes()
}

// layer is a gzip-compressed OCI layer of files, every time in it t.
func layer(t time.Time, files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: t, Format: tar.FormatPAX}
		if f.dir {
			h.Typeflag, h.Name = tar.TypeDir, f.name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	raw := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
