package main

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// cliDoc is docs/reference/cli.md: written by `make docs`, checked by TestCLIReference.
var cliDoc = filepath.Join("..", "..", "docs", "reference", "cli.md")

// flagTable renders a flag set as a Markdown table: flag (with its shorthand), default,
// meaning.
func flagTable(b *bytes.Buffer, fs *pflag.FlagSet) {
	b.WriteString("| flag | default | meaning |\n|---|---|---|\n")
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		name := "`--" + f.Name + "`"
		if f.Shorthand != "" {
			name = "`-" + f.Shorthand + "`, " + name
		}
		def := "(empty)"
		if f.DefValue != "" && f.DefValue != "[]" {
			def = "`" + f.DefValue + "`"
		}
		usage := strings.ReplaceAll(strings.ReplaceAll(f.Usage, "\n", " "), "|", `\|`)
		fmt.Fprintf(b, "| %s | %s | %s |\n", name, def, usage)
	})
}

// renderCLIReference renders the command-line tools' commands and flags, as newCLI
// defines them, as docs/reference/cli.md: the cobra tree is the one source of the page.
func renderCLIReference() []byte {
	root := newCLI(false, io.Discard, io.Discard)
	var b bytes.Buffer
	b.WriteString(`# Command-line tools

<!-- Generated from the command tree (cmd/configstamp, newCLI) by ` + "`make docs`" + `; do not edit.
     TestCLIReference fails when this page and the commands differ. -->

The configstamp binary run with a command as its first argument (or as the kubectl plugin
` + "`kubectl-configstamp`" + `) is the command-line tool; what each command tells and how to read
it: [troubleshooting.md](../troubleshooting.md). ` + "`configstamp COMMAND --help`" + ` prints the same.
The server's flags: [flags.md](flags.md).
`)
	for _, c := range root.Commands() {
		if c.Hidden || !c.IsAvailableCommand() || c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		fmt.Fprintf(&b, "\n## %s\n\n`configstamp %s`: %s.\n\n", c.Name(), c.Use, c.Short)
		flagTable(&b, c.LocalNonPersistentFlags())
	}
	b.WriteString("\n## Flags of every command\n\nkubectl's, for the cluster, the user and the namespace.\n\n")
	flagTable(&b, root.PersistentFlags())
	return b.Bytes()
}

// TestCLIReference: docs/reference/cli.md lists exactly the commands and flags of the
// command-line tools. CONFIGSTAMP_WRITE_DOCS=1 (make docs) writes it instead.
func TestCLIReference(t *testing.T) {
	checkGenerated(t, cliDoc, renderCLIReference())
}
