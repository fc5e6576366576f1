package bench

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestReadAudit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	write := func(s string) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	event := func(verb string) string { return `{"verb":"` + verb + `","stage":"ResponseComplete"}` + "\n" }
	read := func(strict bool, mark AuditMark) ([]string, error) {
		var verbs []string
		readf := ReadAudit
		if strict {
			readf = ReadAuditStrict
		}
		err := readf(path, mark, func(ev *AuditEvent) { verbs = append(verbs, ev.Verb) })
		return verbs, err
	}

	write(event("before"))
	mark := MarkAudit(path)
	// A line being written: only what has its newline is read, by either.
	write(event("get") + event("list") + `{"verb":"wat`)
	for _, strict := range []bool{false, true} {
		if verbs, err := read(strict, mark); err != nil || !slices.Equal(verbs, []string{"get", "list"}) {
			t.Errorf("strict %v, a last line without its newline: %q, %v; want get, list", strict, verbs, err)
		}
	}
	write(`ch"}` + "\n" + "not an event\n" + event("patch"))
	if verbs, err := read(false, mark); err != nil || !slices.Equal(verbs, []string{"get", "list", "watch", "patch"}) {
		t.Errorf("a line that is not an event: %q, %v; want it skipped", verbs, err)
	}
	if _, err := read(true, mark); err == nil || !strings.Contains(err.Error(), "not an event") {
		t.Errorf("strict, a line that is not an event: %v, want an error naming it", err)
	}
	// A field of the wrong type is no event either.
	later := MarkAudit(path)
	write(`{"verb":"get","stageTimestamp":"yesterday"}` + "\n")
	if _, err := read(true, later); err == nil {
		t.Error("strict, an unparseable timestamp: no error")
	}

	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	write(event("get"))
	if _, err := read(false, mark); err == nil || !strings.Contains(err.Error(), "replaced") {
		t.Errorf("a rotated log: %v, want an error", err)
	}
}
