package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

// parse parses args after a --hash-key (required).
func parse(args ...string) (*options, error) {
	fs := flag.NewFlagSet("configstamp", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return parseFlags(fs, append([]string{"--hash-key", "cs/key"}, args...))
}

// --hash-key is required, checked, and --secret-hash-key is its deprecated alias.
func TestFlagsHashKey(t *testing.T) {
	fs := flag.NewFlagSet("configstamp", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if _, err := parseFlags(fs, nil); err == nil || !strings.Contains(err.Error(), "--hash-key NAMESPACE/NAME is required") {
		t.Errorf("without --hash-key: %v", err)
	}
	if _, err := parse("--hash-key", "nonamespace"); err == nil || !strings.Contains(err.Error(), "want namespace/name") {
		t.Errorf("bad --hash-key: %v", err)
	}
	fs = flag.NewFlagSet("configstamp", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if o, err := parseFlags(fs, []string{"--secret-hash-key", "a/b"}); err != nil || o.hashKey != "a/b" {
		t.Errorf("--secret-hash-key: %+v %v", o, err)
	}
}

func TestFlagsDefaults(t *testing.T) {
	o, err := parse()
	if err != nil {
		t.Fatal(err)
	}
	if o.debounce != 2*time.Second || o.debounceMax != 30*time.Second || o.webhookPort != 9443 ||
		o.namespaceLabel != "configstamp.io/inject" || o.leaderElect || o.certs.enabled() || o.registrationName != "configstamp" || o.shutdownDelay != 0 || o.metricsSecure {
		t.Fatalf("defaults: %+v", o)
	}
}

func TestFlagsKebabCaseAndHelp(t *testing.T) {
	fs := flag.NewFlagSet("configstamp", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if _, err := parseFlags(fs, []string{"--hash-key", "cs/key"}); err != nil {
		t.Fatal(err)
	}
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != strings.ToLower(f.Name) || strings.Contains(f.Name, "_") {
			t.Errorf("flag %q is not kebab-case", f.Name)
		}
		if len(f.Usage) < 10 {
			t.Errorf("flag %q has no real help text", f.Name)
		}
	})
}

func TestFlagsRejectBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"--debounce", "-1s"},
		{"--self-signed-secret", "ns/s", "--dev-webhook-url", "https://127.0.0.1:9443"},
		{"--tls-secret", "ns/s", "--dev-webhook-url", "https://127.0.0.1:9443"},
		{"--tls-secret", "ns/s", "--self-signed-secret", "ns/t"},
		{"--ca-switch-delay", "0s"},
		{"--shutdown-delay", "-1s"},
		{"--registration-name", ""},
		{"--notify-url-file", "/u", "--notify-url-secret", "ns/s"},
		{"--notify-url-secret", "no-slash"},
		{"--notify-url-file", "/u", "--notify-format", "email"},
		{"--notify-url-file", "/u", "--notify-batch-window", "0s"},
		{"stray"},
		{"--no-such-flag"},
	} {
		if _, err := parse(args...); err == nil {
			t.Errorf("%v: want an error", args)
		}
	}
}

func TestVersion(t *testing.T) {
	o, err := parse("--version")
	if err != nil || !o.version {
		t.Fatalf("--version: %+v, %v", o, err)
	}
	old := version
	defer func() { version = old }()
	version = "v1.2.3"
	if got := versionLine(); !strings.HasPrefix(got, "configstamp v1.2.3 go") {
		t.Fatalf("version line %q", got)
	}
	version = ""
	if buildVersion() == "" {
		t.Fatal("no version without ldflags")
	}
}

// TestFlagsRole: --role is all by default, takes webhook and watcher, and refuses the
// flags of the other role.
func TestFlagsRole(t *testing.T) {
	if o, err := parse(); err != nil || o.role != "all" || !o.serves() || !o.watches() {
		t.Errorf("default: %+v %v", o, err)
	}
	if o, err := parse("--role", "webhook", "--tls-secret", "cs/tls"); err != nil || !o.serves() || o.watches() {
		t.Errorf("webhook: %+v %v", o, err)
	}
	if o, err := parse("--role", "webhook", "--watcher-user", "a, b", "--watcher-user=c"); err != nil || strings.Join(o.watcherUsers, " ") != "a b c" {
		t.Errorf("--watcher-user repeated and comma-separated: %+v %v", o, err)
	}
	if o, err := parse("--role", "watcher", "--leader-elect"); err != nil || o.serves() || !o.watches() {
		t.Errorf("watcher: %+v %v", o, err)
	}
	for _, args := range [][]string{
		{"--role", "both"},
		{"--role", "webhook", "--leader-elect"},
		{"--role", "watcher", "--self-signed-secret", "cs/s", "--self-signed-hosts", "h"},
		{"--role", "watcher", "--dev-webhook-url", "https://127.0.0.1:9443"},
		{"--role", "watcher", "--webhook-client-ca-file", "/ca.pem"},
		{"--role", "watcher", "--watcher-user", "system:serviceaccount:cs:configstamp"},
	} {
		if _, err := parse(args...); err == nil || !strings.Contains(err.Error(), "--role") {
			t.Errorf("%v: %v, want an error naming --role", args, err)
		}
	}
}

// --waves-deadline has the bounds of the configstamp.io/waves-deadline annotation.
func TestFlagsWavesDeadline(t *testing.T) {
	for _, v := range []string{"0s", "-1m", "10s", "25h"} {
		if _, err := parse("--waves-deadline", v); err == nil || !strings.Contains(err.Error(), "--waves-deadline") {
			t.Errorf("--waves-deadline %s: error %v, want out of bounds", v, err)
		}
	}
	if o, err := parse("--waves-deadline", "30s"); err != nil || o.wavesDeadline != 30*time.Second {
		t.Errorf("--waves-deadline 30s: %v", err)
	}
}
