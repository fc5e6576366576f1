// Package docs checks that the documentation cannot drift from the repository silently:
// relative links and their anchors resolve, every `make X` named is a Makefile target,
// docs/reference/values.md names exactly the chart's values and their defaults, every
// heading of the README as it was before the guide was split out has a home, and every
// page (and quoted heading) the chart and the code point at exists, and every flag named
// alone in a code span is configstamp's or a listed other tool's. (docs/reference/flags.md and cli.md
// are generated and checked in cmd/configstamp: TestFlagsReference, TestCLIReference.)
package docs

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"sigs.k8s.io/yaml"
)

// root is the repository, from test/docs.
const root = "../.."

// pending are pages other branches add (docs/waves.md, CHANGELOG.md): a link to one
// passes while it is missing. Drop them once they are merged.
var pending = []string{}

// docFiles are the Markdown files checked: the top-level documents and docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "SECURITY.md", "RELIABILITY.md", "BENCHMARKS.md", "CHANGELOG.md"}
	files = slices.DeleteFunc(files, func(f string) bool {
		_, err := os.Stat(filepath.Join(root, f))
		return errors.Is(err, fs.ErrNotExist)
	})
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// doc is a Markdown file split into its prose (fenced code blocks blanked) and its code
// (fenced blocks and inline code spans).
type doc struct {
	prose    []string // per line; fenced lines empty
	code     []string // fenced lines and inline spans
	headings []string // heading texts, outside fences
}

var (
	fenceRE   = regexp.MustCompile("^\\s*(```|~~~)")
	spanRE    = regexp.MustCompile("`[^`]*`")
	headingRE = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

func readDoc(t *testing.T, name string) doc {
	t.Helper()
	f, err := os.Open(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var d doc
	fenced := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if fenceRE.MatchString(line) {
			fenced = !fenced
			d.prose = append(d.prose, "")
			continue
		}
		if fenced {
			d.code = append(d.code, line)
			d.prose = append(d.prose, "")
			continue
		}
		d.code = append(d.code, spanRE.FindAllString(line, -1)...)
		if m := headingRE.FindStringSubmatch(line); m != nil {
			d.headings = append(d.headings, m[1])
		}
		d.prose = append(d.prose, line)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return d
}

var (
	linkRE     = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	mdLinkRE   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	schemeRE   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
)

// slug is GitHub's anchor for a heading: its text as rendered (code spans and links
// reduced to their text), lower-cased, punctuation other than - and _ removed, spaces
// turned into hyphens.
func slug(heading string) string {
	s := mdLinkRE.ReplaceAllString(heading, "$1")
	s = strings.ToLower(strings.ReplaceAll(s, "`", ""))
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the fragment identifiers a file's headings (and HTML anchors) give, with
// GitHub's -1, -2 suffixes for repeated headings.
func anchors(d doc) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, h := range d.headings {
		s := slug(h)
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	for _, line := range d.prose {
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
	}
	return out
}

// TestDocsLinks: every relative link of the docs names a file that exists, and every
// #anchor one of that file's headings.
func TestDocsLinks(t *testing.T) {
	docs := map[string]doc{}
	get := func(name string) doc {
		if d, ok := docs[name]; ok {
			return d
		}
		d := readDoc(t, name)
		docs[name] = d
		return d
	}
	files := docFiles(t)
	for _, name := range files {
		for i, line := range get(name).prose {
			line = spanRE.ReplaceAllString(line, "``")
			for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if schemeRE.MatchString(target) {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				dest := name
				if path != "" {
					dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(name), path)))
				}
				at := fmt.Sprintf("%s:%d: %s", name, i+1, target)
				st, err := os.Stat(filepath.Join(root, dest))
				if errors.Is(err, fs.ErrNotExist) && slices.Contains(pending, dest) {
					continue
				}
				if err != nil {
					t.Errorf("%s: no such file %s", at, dest)
					continue
				}
				if anchor == "" || st.IsDir() || !strings.HasSuffix(dest, ".md") {
					continue
				}
				if !anchors(get(dest))[anchor] {
					t.Errorf("%s: %s has no heading #%s", at, dest, anchor)
				}
			}
		}
	}
	if len(files) < 10 {
		t.Errorf("only %d Markdown files found: %v", len(files), files)
	}
}

var (
	targetRE = regexp.MustCompile(`(?m)^([A-Za-z0-9_-]+):`)
	// makeUseRE is `make`, its options and variable assignments (-j 4, TEST_JOBS=2), then the
	// first target.
	makeUseRE = regexp.MustCompile(`(?:^|[^\w-])make(?:\s+(?:-\S+|\d+|[A-Za-z_][A-Za-z0-9_]*=\S*))*\s+([a-z][a-z0-9_-]*)`)
)

// TestDocsMakeTargets: every `make X` the docs show (in code) is a target of the Makefile.
func TestDocsMakeTargets(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range targetRE.FindAllStringSubmatch(string(raw), -1) {
		targets[m[1]] = true
	}
	used := 0
	for _, name := range docFiles(t) {
		for _, c := range readDoc(t, name).code {
			for _, m := range makeUseRE.FindAllStringSubmatch(c, -1) {
				used++
				if !targets[m[1]] {
					t.Errorf("%s: %q names make %s, which the Makefile does not define", name, c, m[1])
				}
			}
		}
	}
	if used == 0 {
		t.Error("no make command found in the docs: the check finds nothing")
	}
}

// schemaLeaves are the chart's values, as values.schema.json defines them: the dotted
// paths of its properties that are not objects with properties of their own.
func schemaLeaves(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "deploy/helm/configstamp/values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	defs, _ := schema["definitions"].(map[string]any)
	var leaves []string
	var walk func(node map[string]any, at string)
	walk = func(node map[string]any, at string) {
		if ref, ok := node["$ref"].(string); ok {
			node, _ = defs[strings.TrimPrefix(ref, "#/definitions/")].(map[string]any)
		}
		props, ok := node["properties"].(map[string]any)
		if !ok || len(props) == 0 {
			leaves = append(leaves, at)
			return
		}
		for k, v := range props {
			if at == "" && k == "global" {
				continue // helm's own, for subcharts
			}
			sub, _ := v.(map[string]any)
			walk(sub, strings.TrimPrefix(at+"."+k, "."))
		}
	}
	walk(schema, "")
	slices.Sort(leaves)
	return leaves
}

// documentedValues are the values the first column of values.md's tables names: each
// code span a value's dotted path, or .x for a sibling of the span before it.
func documentedValues(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, line := range readDoc(t, "docs/reference/values.md").prose {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		names = append(names, rowValues(cells[1])...)
	}
	slices.Sort(names)
	return names
}

// rowValues are the values a row's first cell names: each code span a value's dotted
// path, or .x for a sibling of the span before it.
func rowValues(cell string) []string {
	var names []string
	last := ""
	for _, span := range spanRE.FindAllString(cell, -1) {
		name := strings.Trim(span, "`")
		if strings.HasPrefix(name, ".") {
			parent, _, _ := strings.Cut(last, ".")
			if i := strings.LastIndex(last, "."); i >= 0 {
				parent = last[:i]
			}
			name = parent + name
		}
		names = append(names, name)
		last = name
	}
	return names
}

// TestDocsValuesReference: docs/reference/values.md names every value of the chart's
// schema, and no value the schema does not have.
func TestDocsValuesReference(t *testing.T) {
	leaves, names := schemaLeaves(t), documentedValues(t)
	for _, l := range leaves {
		if !slices.Contains(names, l) {
			t.Errorf("values.schema.json has %s; docs/reference/values.md does not name it", l)
		}
	}
	for _, n := range names {
		if !slices.Contains(leaves, n) {
			t.Errorf("docs/reference/values.md names %s; values.schema.json has no such value", n)
		}
	}
	if len(leaves) < 50 {
		t.Errorf("only %d values found in the schema", len(leaves))
	}
}

// TestDocsReadmeHeadingsKept: every heading of README.md as it was at 8278812 (before the
// guide), listed in testdata with the page that now holds it, is a heading of that page.
func TestDocsReadmeHeadingsKept(t *testing.T) {
	raw, err := os.ReadFile("testdata/readme-8278812-headings.txt")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.SplitSeq(strings.TrimSpace(string(raw)), "\n") {
		heading, page, ok := strings.Cut(line, "\t")
		if !ok {
			t.Errorf("testdata line %q: want HEADING<TAB>PAGE", line)
			continue
		}
		n++
		text := strings.TrimSpace(strings.TrimLeft(heading, "#"))
		if !slices.Contains(readDoc(t, page).headings, text) {
			t.Errorf("README heading %q: not a heading of %s", heading, page)
		}
	}
	if n < 40 {
		t.Errorf("only %d headings listed", n)
	}
}

var (
	// pointerRE is a pointer into the docs from outside them: a page (docs/….md, or a
	// top-level document, .md optional), then, optionally, a heading in quotes ("README
	// \"Network policy per platform\"", "docs/install.md: \"Namespaced install\"").
	pointerRE = regexp.MustCompile(`(?:^|[^\w/.-])(docs/[\w./-]+\.md|(?:README|SECURITY|RELIABILITY|BENCHMARKS|CHANGELOG)(?:\.md)?)(?:'s)?(?:[,:]?\s+\\?"([^"\\]+)\\?")?`)
	// wrapRE joins a comment or text wrapped over lines: the line break, the indent and a
	// comment marker of the next line.
	wrapRE = regexp.MustCompile(`[ \t]*\r?\n[ \t]*(?:#+|//+|\{\{-?\s*/\*)?[ \t]*`)
)

// pointerFiles are the files outside the Markdown docs that point into them: the chart
// (comments, NOTES.txt, fail messages), the Go code (help texts, comments), the Makefile;
// not this package, whose comments show the forms.
func pointerFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if name := d.Name(); rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || name == "vendor" || rel == "docs" || rel == "test/docs") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(rel) {
		case ".go", ".yaml", ".yml", ".tpl", ".txt", ".json", ".sh":
			files = append(files, rel)
		case "":
			if d.Name() == "Makefile" || d.Name() == "Dockerfile" {
				files = append(files, rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestDocsPointers: every page of the docs that the chart or the code names exists, and
// a heading named with it in quotes is a heading of that page, so that moving a section
// (as the README split did) cannot leave an install's error message or a comment
// pointing at nothing.
func TestDocsPointers(t *testing.T) {
	n := 0
	for _, name := range pointerFiles(t) {
		raw, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		text := wrapRE.ReplaceAllString(string(raw), " ")
		for _, m := range pointerRE.FindAllStringSubmatch(text, -1) {
			page, heading := m[1], m[2]
			if !strings.HasSuffix(page, ".md") {
				if heading == "" {
					continue // the word README alone, e.g. a README.md of testdata
				}
				page += ".md"
			}
			n++
			if testing.Verbose() {
				t.Logf("%s: %s %q", name, page, heading)
			}
			if _, err := os.Stat(filepath.Join(root, page)); err != nil {
				if !slices.Contains(pending, page) {
					t.Errorf("%s: names %s, which does not exist", name, page)
				}
				continue
			}
			if heading != "" && !slices.Contains(readDoc(t, page).headings, heading) {
				t.Errorf("%s: names %s %q, which is not a heading of it", name, page, heading)
			}
		}
	}
	if n < 10 {
		t.Errorf("only %d pointers into the docs found: the check finds nothing", n)
	}
}

// splitCell splits a table cell at ", " outside code spans: `a, b`, 5s -> [`a, b` 5s].
func splitCell(cell string) []string {
	var parts []string
	inCode, start := false, 0
	for i := 0; i < len(cell); i++ {
		switch {
		case cell[i] == '`':
			inCode = !inCode
		case !inCode && strings.HasPrefix(cell[i:], ", "):
			parts = append(parts, strings.TrimSpace(cell[start:i]))
			start = i + 2
		}
	}
	return append(parts, strings.TrimSpace(cell[start:]))
}

// documentedDefaults are the defaults values.md's tables give, by value: a row's second
// column split like its first, where both name as many.
func documentedDefaults(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, line := range readDoc(t, "docs/reference/values.md").prose {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		names := rowValues(cells[1])
		defs := splitCell(strings.TrimSpace(cells[2]))
		if len(defs) != len(names) {
			continue
		}
		for i, n := range names {
			out[n] = defs[i]
		}
	}
	return out
}

// chartDefault is how values.md writes a default of values.yaml: true, 4, 2s,
// `cert-manager`, `[]`, `{}`, `[a, b]`; ok is false for a value it writes in words (an
// empty string: "none", "the chart's appVersion") or a map with keys.
func chartDefault(v any) (want []string, ok bool) {
	switch v := v.(type) {
	case bool:
		return []string{strconv.FormatBool(v)}, true
	case float64:
		return []string{strconv.FormatFloat(v, 'f', -1, 64)}, true
	case string:
		if v == "" {
			return nil, false
		}
		return []string{v, "`" + v + "`"}, true
	case []any:
		items := make([]string, len(v))
		for i, it := range v {
			s, isString := it.(string)
			if !isString {
				return nil, false
			}
			items[i] = s
		}
		return []string{"`[" + strings.Join(items, ", ") + "]`"}, true
	case map[string]any:
		return []string{"`{}`"}, len(v) == 0
	}
	return nil, false
}

// TestDocsValuesDefaults: each default values.md gives is values.yaml's, so that changing a
// default in the chart cannot leave the reference saying the old one.
func TestDocsValuesDefaults(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "deploy/helm/configstamp/values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	n := 0
	for name, doc := range documentedDefaults(t) {
		var v any = values
		for key := range strings.SplitSeq(name, ".") {
			m, _ := v.(map[string]any)
			v = m[key]
		}
		want, ok := chartDefault(v)
		if !ok {
			continue
		}
		n++
		// A default may go on in words after a colon: "`{}`: preferred anti-affinity".
		if got, _, _ := strings.Cut(doc, ": "); !slices.Contains(want, got) {
			t.Errorf("docs/reference/values.md gives %s the default %s; values.yaml has %s", name, doc, want[len(want)-1])
		}
	}
	if n < 50 {
		t.Errorf("only %d defaults compared", n)
	}
}

// otherFlags are flags of other tools the docs name on their own in code spans, by tool.
var otherFlags = []string{
	// Stakater Reloader
	"--auto-reload-all", "--enable-csi-integration", "--ignore-annotation", "--namespaces-to-ignore", "--reload-strategy",
	// kube-apiserver
	"--admission-control-config-file", "--audit-log-maxsize", "--client-ca-file",
	// cert-manager
	"--enable-certificate-owner-ref",
	// Secrets Store CSI driver
	"--enable-secret-rotation",
	// helm
	"--reset-then-reuse-values", "--reuse-values",
	// Flux helm-controller
	"--watch-configs-label-selector",
	// make
	"--keep-going",
}

var (
	flagRowRE  = regexp.MustCompile("^\\| (?:`-[a-z]`, )?`(--[a-z0-9-]+)`")
	flagSpanRE = regexp.MustCompile("^`(--[a-z0-9-]+)(?:=[^`]*| [^ `=]+)?`$")
)

// TestDocsFlagMentions: a flag the docs name on its own in a code span (`--debounce`,
// `--debounce=0`, `--debounce 0`; not a command line such as `--set a=b`) is one of configstamp's, as the generated references list them
// (flags.md, cli.md), or another tool's listed in otherFlags, so that a renamed flag
// cannot live on in the prose (CHANGELOG.md aside).
func TestDocsFlagMentions(t *testing.T) {
	known := map[string]bool{}
	for _, page := range []string{"docs/reference/flags.md", "docs/reference/cli.md"} {
		for _, line := range readDoc(t, page).prose {
			if m := flagRowRE.FindStringSubmatch(line); m != nil {
				known[m[1]] = true
			}
		}
	}
	if len(known) < 60 {
		t.Fatalf("only %d flags in docs/reference/flags.md and cli.md", len(known))
	}
	for _, f := range otherFlags {
		known[f] = true
	}
	n := 0
	for _, name := range docFiles(t) {
		if name == "CHANGELOG.md" {
			continue // it names flags that were renamed or removed
		}
		for _, line := range readDoc(t, name).prose {
			for _, span := range spanRE.FindAllString(line, -1) {
				m := flagSpanRE.FindStringSubmatch(span)
				if m == nil {
					continue
				}
				n++
				if !known[m[1]] {
					t.Errorf("%s: %s is no flag of configstamp's (docs/reference/flags.md, cli.md) nor in otherFlags", name, span)
				}
			}
		}
	}
	if n < 50 {
		t.Errorf("only %d flags named in the docs: the check finds nothing", n)
	}
}
