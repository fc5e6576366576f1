package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// flagsDoc is docs/reference/flags.md: written by `make docs`, checked by TestFlagsReference.
var flagsDoc = filepath.Join("..", "..", "docs", "reference", "flags.md")

// renderFlagsReference renders the server's flags, as bindOptions defines them, as the
// Markdown page docs/reference/flags.md: the flag set is the one source of the page.
func renderFlagsReference() []byte {
	fs := flag.NewFlagSet("configstamp", flag.ContinueOnError)
	bindOptions(fs)
	var b bytes.Buffer
	b.WriteString(`# Flags

<!-- Generated from the flag set (cmd/configstamp, bindOptions) by ` + "`make docs`" + `; do not edit.
     TestFlagsReference fails when this page and the flags differ. -->

The flags of the ` + "`configstamp`" + ` server. The chart sets them from its values
([values.md](values.md); ` + "`extraArgs`" + ` adds others); for running the binary yourself,
` + "`configstamp --help`" + ` lists them too. Besides these, ` + "`--kubeconfig`" + ` (controller-runtime's)
names the kubeconfig to use out of a cluster (default: in-cluster). The command-line tools
(` + "`configstamp explain`" + `, ` + "`impact`" + `, ` + "`hash`" + `) have flags of their own:
[cli.md](cli.md).

| flag | default | meaning |
|---|---|---|
`)
	fs.VisitAll(func(f *flag.Flag) {
		def := "(empty)"
		if f.DefValue != "" {
			def = "`" + f.DefValue + "`"
		}
		usage := strings.ReplaceAll(strings.ReplaceAll(f.Usage, "\n", " "), "|", `\|`)
		fmt.Fprintf(&b, "| `--%s` | %s | %s |\n", f.Name, def, usage)
	})
	b.WriteString(`
Environment: ` + "`CONFIGSTAMP_MEMORY_LIMIT`" + ` (bytes; the chart sets it from
` + "`resources.limits.memory`" + `) sets the Go memory limit to 80% of it, unless ` + "`GOMEMLIMIT`" + `
is set. The watcher role (` + "`--role watcher`" + `) runs with ` + "`GOGC=30`" + `, the webhook role (` + "`--role webhook`" + `) with ` + "`GOGC=50`" + `,
unless ` + "`GOGC`" + ` is set (the heap held to about 1.3 and 1.5 times what is live instead of twice, for some
more CPU: BENCHMARKS.md).
`)
	return b.Bytes()
}

// TestFlagsReference: docs/reference/flags.md lists exactly the flags the server defines,
// with their defaults and help text. CONFIGSTAMP_WRITE_DOCS=1 (make docs) writes it instead.
func TestFlagsReference(t *testing.T) {
	checkGenerated(t, flagsDoc, renderFlagsReference())
}

// checkGenerated fails when the generated page at path differs from want, naming the
// first line that differs; with CONFIGSTAMP_WRITE_DOCS=1 (make docs) it writes want there.
func checkGenerated(t *testing.T, path string, want []byte) {
	t.Helper()
	if os.Getenv("CONFIGSTAMP_WRITE_DOCS") == "1" {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := range max(len(gl), len(wl)) {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("%s is stale (run make docs): line %d is\n%s\nthe code gives\n%s", path, i+1, g, w)
			}
		}
	}
}
