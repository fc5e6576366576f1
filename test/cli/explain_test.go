package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/explain"
	"github.com/configstamp/configstamp/internal/hashkey"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/hashdoc"
)

// known names the real values a report of obj may show: its stamp, record and per-source
// digests, and the namespaces.
func known(t *testing.T, f *fixture, kind *workload.Kind, name string) map[string]string {
	t.Helper()
	obj := kind.New()
	if err := k8s.Get(bg, client.ObjectKey{Namespace: f.in, Name: name}, obj); err != nil {
		t.Fatal(err)
	}
	m := map[string]string{f.in: "NS", f.out: "NS-OUT"}
	tmpl := kind.Template(obj)
	if h := tmpl.Annotations[stamp.HashAnnotation]; h != "" {
		m[h] = "<stamp>"
	}
	if rec, ok := stamp.ParseObserved(obj.GetAnnotations()[stamp.ObservedAnnotation]); ok && m[rec.Hash] == "" {
		m[rec.Hash] = "<record>"
	}
	for id, d := range stamp.ParseSources(tmpl.Annotations[stamp.SourcesAnnotation]) {
		if d != "missing" {
			m[d] = "<stamped " + id + ">"
		}
	}
	return m
}

// TestExplain runs explain on a workload in each state, as a table and as JSON, and
// compares both with golden files; the JSON is also checked field by field against the
// workload's real stamp.
func TestExplain(t *testing.T) {
	f := fixtures(t)
	for _, tc := range []struct {
		name    string
		kind    *workload.Kind
		args    []string
		verdict string
		reason  string
		roll    bool
	}{
		{name: "current", kind: workload.Deployment, args: []string{"deployment/current"}, verdict: explain.VerdictUpToDate, reason: "up to date"},
		{name: "partial", kind: workload.Deployment, args: []string{"deploy/partial"}, verdict: explain.VerdictUpToDate,
			reason: "up to date: configmap/app2 changed since its pods started, but none of the keys they see did"},
		{name: "changed", kind: workload.Deployment, args: []string{"deployment/changed"}, verdict: explain.VerdictWouldRoll,
			reason: "configmap/cfg changed since the last rollout", roll: true},
		{name: "skipped", kind: workload.Deployment, args: []string{"deployment/skipped"}, verdict: explain.VerdictSkipped,
			reason: "skipped: annotation configstamp.io/skip=true"},
		{name: "held", kind: workload.Deployment, args: []string{"deployment/held", "--hash-key", keyRef}, verdict: explain.VerdictHeld,
			reason: "secret/db is missing, rollout held"},
		// Without the hash key, a required Secret deleted since the stamp still holds:
		// whether it is missing needs no key.
		{name: "held-nokey", kind: workload.Deployment, args: []string{"deployment/held", "--hash-key", ""}, verdict: explain.VerdictHeld,
			reason: "secret/db is missing, rollout held"},
		{name: "adopted", kind: workload.Deployment, args: []string{"deployment/adopted"}, verdict: explain.VerdictNotStamped,
			reason: "not stamped yet (created before configstamp; adopted, not rolled)"},
		{name: "agent", kind: workload.DaemonSet, args: []string{"ds/agent"}, verdict: explain.VerdictUpToDate, reason: "up to date"},
		{name: "store", kind: workload.StatefulSet, args: []string{"statefulset/store"}, verdict: explain.VerdictUpToDate, reason: "up to date"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, name, _ := strings.Cut(tc.args[0], "/")
			m := known(t, f, tc.kind, name)
			// The current hash where it differs from the stamp, computed independently
			// from docs/hash.md (test/hashdoc), so a golden file shows it by name and a
			// wrong one fails.
			var key corev1.Secret
			if err := k8s.Get(bg, client.ObjectKey{Namespace: keyNamespace, Name: keyName}, &key); err != nil {
				t.Fatal(err)
			}
			switch tc.name {
			case "changed":
				m[hashdoc.Hash([]hashdoc.Source{{Name: "cfg"}}, func(n string) *corev1.ConfigMap { return liveConfigMap(t, f.in, n) }, key.Data[hashkey.DataKey], f.in)] = "<current>"
			case "held":
				srcs := []hashdoc.Source{{Name: "app", Keys: []string{"a"}, EnvOnly: true}, {Name: "db", Keys: []string{"password"}, EnvOnly: true, Secret: true}}
				m[hashdoc.Keyed(srcs, func(secret bool, n string) *corev1.ConfigMap {
					if secret {
						return nil // deleted
					}
					return liveConfigMap(t, f.in, n)
				}, key.Data[hashkey.DataKey], f.in)] = "<current>"
			}
			args := append([]string{"explain", "-n", f.in}, tc.args...)
			golden(t, "explain-"+tc.name+".txt", mask(ok(t, args...), m))
			out := ok(t, append(args, "-o", "json")...)
			golden(t, "explain-"+tc.name+".json", mask(out, m))
			var r explain.Report
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatal(err)
			}
			if r.Verdict != tc.verdict || !strings.HasPrefix(r.Reason, tc.reason) || r.Roll != tc.roll {
				t.Errorf("got %s %q roll=%v, want %s %q roll=%v", r.Verdict, r.Reason, r.Roll, tc.verdict, tc.reason, tc.roll)
			}
			obj := tc.kind.New()
			if err := k8s.Get(bg, client.ObjectKey{Namespace: f.in, Name: name}, obj); err != nil {
				t.Fatal(err)
			}
			tmpl := tc.kind.Template(obj)
			if r.Stamp.Hash != tmpl.Annotations[stamp.HashAnnotation] || r.Stamp.Sources != tmpl.Annotations[stamp.SourcesAnnotation] {
				t.Errorf("stamp %+v, want the template's %v", r.Stamp, tmpl.Annotations)
			}
			// Up to date means the content now hashes to what the webhook stamped.
			if tc.verdict == explain.VerdictUpToDate && (r.Current.Hash != r.Stamp.Hash || r.Current.Sources != r.Stamp.Sources) {
				t.Errorf("up to date, but current %+v differs from the stamp %+v", r.Current, r.Stamp)
			}
			if tc.verdict == explain.VerdictWouldRoll && r.Current.Hash == r.Stamp.Hash {
				t.Errorf("would roll, but the current hash is the stamp")
			}
		})
	}
}

// liveConfigMap reads a ConfigMap (nil: it does not exist).
func liveConfigMap(t *testing.T, namespace, name string) *corev1.ConfigMap {
	t.Helper()
	var cm corev1.ConfigMap
	if err := k8s.Get(bg, client.ObjectKey{Namespace: namespace, Name: name}, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		t.Fatal(err)
	}
	return &cm
}

// TestExplainEvents checks that the watcher's Events are shown.
func TestExplainEvents(t *testing.T) {
	f := fixtures(t)
	for name, reason := range map[string]string{"changed": "ConfigChanged", "held": "ConfigMissing"} {
		var r explain.Report
		if err := json.Unmarshal([]byte(ok(t, "explain", "-n", f.in, "deployment/"+name, "-o", "json")), &r); err != nil {
			t.Fatal(err)
		}
		if len(r.Events) == 0 || r.Events[len(r.Events)-1].Reason != reason {
			t.Errorf("%s: events %+v, want the latest to be %s", name, r.Events, reason)
		}
	}
}

// TestExplainNotInScope explains a workload of a namespace that does not opt in, and
// one that opts in by a label of another name (--namespace-label).
func TestExplainNotInScope(t *testing.T) {
	f := fixtures(t)
	m := known(t, f, workload.Deployment, "current")
	args := []string{"explain", "-n", f.out, "deployment/outside"}
	golden(t, "explain-outside.txt", mask(ok(t, args...), m))
	out := ok(t, append(args, "-o", "json")...)
	golden(t, "explain-outside.json", mask(out, m))
	var r explain.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.Verdict != explain.VerdictNotInScope || r.InScope {
		t.Errorf("got %s inScope=%v", r.Verdict, r.InScope)
	}
	// With another opt-in label, the opted-in namespace is not in scope either.
	if err := json.Unmarshal([]byte(ok(t, "explain", "-n", f.in, "deployment/current", "-o", "json", "--namespace-label", "example.com/other")), &r); err != nil {
		t.Fatal(err)
	}
	if r.Verdict != explain.VerdictNotInScope {
		t.Errorf("--namespace-label example.com/other: got %s", r.Verdict)
	}
}

// TestExplainYAML checks that -o yaml holds the same report as -o json.
func TestExplainYAML(t *testing.T) {
	f := fixtures(t)
	out := ok(t, "explain", "-n", f.in, "deployment/changed", "-o", "yaml")
	for _, want := range []string{"verdict: would-roll", "reason: configmap/cfg changed since the last rollout", "status: changed"} {
		if !strings.Contains(out, want) {
			t.Errorf("yaml lacks %q:\n%s", want, out)
		}
	}
}

// TestPlugin runs the binary under the plugin's name (a symlink), directly and through
// kubectl, and checks that it prints what the binary prints.
func TestPlugin(t *testing.T) {
	f := fixtures(t)
	dir := t.TempDir()
	plugin := filepath.Join(dir, "kubectl-configstamp")
	if err := os.Symlink(env.Binary, plugin); err != nil {
		t.Fatal(err)
	}
	want := ok(t, "explain", "-n", f.in, "deployment/current")
	if r := run(t, plugin, "explain", "-n", f.in, "deployment/current"); r.code != 0 || r.stdout != want {
		t.Errorf("as kubectl-configstamp: exit %d\n%s\nstderr: %s\nwant:\n%s", r.code, r.stdout, r.stderr, want)
	}
	// The plugin's help names it as kubectl shows it.
	if r := run(t, plugin, "--help"); r.code != 0 || !strings.Contains(r.stdout, "kubectl configstamp") {
		t.Errorf("plugin help: exit %d\n%s", r.code, r.stdout)
	}
	// The plain binary without a tool's name is the server: --version still answers.
	if r := run(t, "", "--version"); r.code != 0 || !strings.HasPrefix(r.stdout, "configstamp ") {
		t.Errorf("--version: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	kubectl, err := lookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl not on PATH (TestHash needs it too): %v", err)
	}
	cmd := env.Command(dir, []string{"PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH")}, "kubectl",
		"configstamp", "explain", "--namespace", f.in, "deployment/current", "--hash-key", keyRef)
	cmd.Path = kubectl
	if r := runCmd(t, cmd); r.code != 0 || r.stdout != want {
		t.Errorf("kubectl configstamp: exit %d\n%s\nstderr: %s\nwant:\n%s", r.code, r.stdout, r.stderr, want)
	}
}
