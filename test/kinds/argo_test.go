package kinds

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/argo"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/apitime"
	"github.com/configstamp/configstamp/test/internal/configmaps"
)

// Log messages of configstamp's detection of the Rollout kind.
const (
	notServedMsg = "Kind not served (its CRD is not installed); checking again later"
	watchingMsg  = "Watching workloads of a kind now served by the API server"
	// detectInterval is how often configstamp looks for a kind not served yet.
	detectInterval = 15 * time.Second
)

// argoClient is an admin client that knows Rollouts; made after the CRD is installed.
func argoClient(t testing.TB) client.Client {
	t.Helper()
	return env.ArgoClient(t)
}

// newRollout is a Rollout of two replicas consuming cm (there is no Argo controller: it
// never runs pods, its generations count its template changes).
func newRollout(ns, name, cm string) *argo.Rollout {
	return &argo.Rollout{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       argo.RolloutSpec{Replicas: ptr.To[int32](2), Selector: selector(name), Template: podTemplate(name, cm)},
	}
}

// createRefRollout creates a Rollout that runs a Deployment's template (spec.workloadRef)
// and has none of its own, naming cm as an extra source: configstamp leaves it alone.
func createRefRollout(t testing.TB, c client.Client, ns, name, cm string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": argo.GroupVersion.String(), "kind": "Rollout",
		"metadata": map[string]any{"namespace": ns, "name": name,
			"annotations": map[string]any{stamp.ExtraSourcesAnnotation: "configmap/" + cm}},
		"spec": map[string]any{
			"replicas":    int64(2),
			"selector":    map[string]any{"matchLabels": map[string]any{"app": name}},
			"workloadRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
		},
	}}
	if err := c.Create(bg, u); err != nil {
		t.Fatalf("create rollout %s/%s with a workloadRef: %v", ns, name, err)
	}
	refUntouched(t, c, u)
	return u
}

// refUntouched asserts that configstamp never wrote the workloadRef Rollout: the same
// resourceVersion as created, none of configstamp's annotations, no template.
func refUntouched(t testing.TB, c client.Client, created *unstructured.Unstructured) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(created.GroupVersionKind())
	if err := c.Get(bg, client.ObjectKeyFromObject(created), u); err != nil {
		t.Fatal(err)
	}
	for k := range u.GetAnnotations() {
		if strings.HasPrefix(k, "configstamp.io/") && k != stamp.ExtraSourcesAnnotation {
			t.Errorf("%s: configstamp's annotation %s", u.GetName(), k)
		}
	}
	if tmpl, ok, _ := unstructured.NestedMap(u.Object, "spec", "template"); ok {
		t.Errorf("%s: spec.template %v", u.GetName(), tmpl)
	}
	if u.GetResourceVersion() != created.GetResourceVersion() {
		t.Errorf("%s: written (resourceVersion %s -> %s)", u.GetName(), created.GetResourceVersion(), u.GetResourceVersion())
	}
}

// expectGeneration waits (up to within) until the Rollout is at generation gen (one per
// template change, the stamp's included) and asserts it stays there over settle.
func expectGeneration(t testing.TB, c client.Client, r *argo.Rollout, gen int64, within time.Duration) *argo.Rollout {
	t.Helper()
	check := func() error {
		if got := reread(t, c, r).GetGeneration(); got != gen {
			return fmt.Errorf("generation %d, want %d", got, gen)
		}
		return nil
	}
	what := fmt.Sprintf("rollout %s at generation %d", r.Name, gen)
	framework.Eventually(t, within, what, check)
	framework.Consistently(t, settle, what, check)
	return reread(t, c, r).(*argo.Rollout)
}

// unwritten asserts that nothing writes the Rollout over settle.
func unwritten(t testing.TB, c client.Client, r *argo.Rollout) {
	t.Helper()
	rv := reread(t, c, r).GetResourceVersion()
	framework.Consistently(t, settle, "rollout "+r.Name+" not written", func() error {
		if got := reread(t, c, r).GetResourceVersion(); got != rv {
			return fmt.Errorf("resourceVersion %s -> %s", rv, got)
		}
		return nil
	})
}

// rolloutLog reads configstamp's log for what it says about Rollouts: how many times it
// found the kind not served (debug level), how many times it started watching it, and
// every other line above debug level that mentions Rollouts (the start-up lines that
// echo the flags and the webhook paths aside): noise while the CRD is absent; errs are
// those at error level. Errors that do not concern Rollouts are not counted: the other
// tests run meanwhile.
func rolloutLog(cs *framework.Configstamp) (notServed, watching int, errs, mentions []string) {
	for _, rec := range cs.Logs() {
		line, _ := json.Marshal(rec)
		// The names of this package's namespaces say "rollouts": look past them.
		about := maps.Clone(rec)
		delete(about, "namespace")
		delete(about, "object")
		aboutLine, _ := json.Marshal(about)
		lower := bytes.ToLower(aboutLine)
		switch {
		case rec["msg"] == notServedMsg && rec["kind"] == "Rollout" && rec["level"] == "debug":
			notServed++
		case rec["msg"] == watchingMsg && rec["kind"] == "Rollout":
			watching++
		case rec["level"] == "debug" || rec["msg"] == "Starting configstamp" || rec["msg"] == "Registering webhook":
		case bytes.Contains(lower, []byte("rollout")) || bytes.Contains(lower, []byte("argoproj")):
			mentions = append(mentions, string(line))
			if rec["level"] == "error" {
				errs = append(errs, string(line))
			}
		}
	}
	return notServed, watching, errs, mentions
}

// testRolloutCRDLater: configstamp started with --argo-rollouts before the Rollout CRD
// exists says nothing about it (above debug level) while it is absent; once it is
// installed, a Rollout is stamped at creation by the webhook at once, and the watcher,
// which finds the kind within its detection interval, re-stamps it once per config
// change (the first one made before it found the kind) and never on a label-only one.
// A Rollout with a workloadRef is left alone.
func testRolloutCRDLater(t *testing.T, cs *framework.Configstamp, started time.Time) {
	ns := env.NewNamespace(t, true)
	createConfigMap(t, ns, "cfg", map[string]string{"k": "1"}, nil)
	// Let configstamp look for the kind twice: at start and one interval later.
	time.Sleep(time.Until(started.Add(detectInterval + time.Second)))
	notServed, watching, _, noise := rolloutLog(cs)
	if notServed < 2 || watching != 0 || len(noise) > 0 {
		t.Fatalf("while the CRD is absent: %d not-served checks (want 2 or more), %d watch starts (want 0), noise:\n%s",
			notServed, watching, strings.Join(noise, "\n"))
	}

	if err := env.InstallCRDs(bg, framework.ArgoRolloutsCRD()); err != nil {
		t.Fatal(err)
	}
	installed := time.Now()
	c := argoClient(t)
	r := newRollout(ns, "app", "cfg")
	if err := c.Create(bg, r); err != nil {
		t.Fatalf("create rollout: %v", err)
	}
	stampedWith(t, r, docHash(t, ns, "cfg"))
	if r.Generation != 1 {
		t.Fatalf("created at generation %d", r.Generation)
	}
	ref := createRefRollout(t, c, ns, "by-ref", "cfg")

	configmaps.SetData(t, env.Client, ns, "cfg", "k", "2")
	r = expectGeneration(t, c, r, 2, 2*detectInterval)
	stampedWith(t, r, docHash(t, ns, "cfg"))
	if _, watching, _, _ := rolloutLog(cs); watching != 1 {
		t.Fatalf("%d watch starts of Rollouts, want 1", watching)
	}
	t.Logf("the first config change re-stamped the Rollout, and the settle period passed, %s after the CRD was installed", time.Since(installed).Round(time.Second))

	configmaps.SetData(t, env.Client, ns, "cfg", "k", "3")
	r = expectGeneration(t, c, r, 3, time.Minute)
	stampedWith(t, r, docHash(t, ns, "cfg"))
	relabel(t, ns, "cfg")
	unwritten(t, c, r)
	refUntouched(t, c, ref)
	if _, _, errs, _ := rolloutLog(cs); len(errs) > 0 {
		t.Errorf("errors about Rollouts in configstamp's log:\n%s", strings.Join(errs, "\n"))
	}
	checkAfterRestart(func(t *testing.T) {
		if got := reread(t, c, r); got.GetResourceVersion() != r.ResourceVersion {
			t.Errorf("rollout %s written after the restart: resourceVersion %s -> %s", r.Name, r.ResourceVersion, got.GetResourceVersion())
		}
		refUntouched(t, c, ref)
	})
}

// testRolloutCRDFirst: configstamp started with the Rollout CRD installed watches
// Rollouts from the start; a Rollout created while configstamp was down gets a record,
// not a stamp; a new one is stamped at creation; each is re-stamped once per config
// change and never on a label-only one.
func testRolloutCRDFirst(t *testing.T, start func() *framework.Configstamp) {
	c := argoClient(t)
	ns := env.NewNamespace(t, true)
	createConfigMap(t, ns, "down-cfg", map[string]string{"k": "1"}, nil)
	createConfigMap(t, ns, "cfg", map[string]string{"k": "1"}, nil)
	apitime.NextSecond()
	// configstamp is stopped; its registration stays (failurePolicy Ignore).
	down := newRollout(ns, "down", "down-cfg")
	if err := c.Create(bg, down); err != nil {
		t.Fatalf("create rollout: %v", err)
	}
	if h := down.Spec.Template.Annotations[stamp.HashAnnotation]; h != "" {
		t.Fatalf("stamped while configstamp was down: %s", h)
	}

	cs := start()
	framework.Eventually(t, 10*time.Second, "Rollouts watched from the start", func() error {
		if _, watching, _, _ := rolloutLog(cs); watching != 1 {
			return fmt.Errorf("%d watch starts", watching)
		}
		return nil
	})
	if notServed, _, errs, _ := rolloutLog(cs); notServed > 0 || len(errs) > 0 {
		t.Fatalf("%d not-served checks (want 0), errors about Rollouts:\n%s", notServed, strings.Join(errs, "\n"))
	}
	waitRecord(t, c, down, docHash(t, ns, "down-cfg"))

	r := newRollout(ns, "app", "cfg")
	if err := c.Create(bg, r); err != nil {
		t.Fatalf("create rollout: %v", err)
	}
	stampedWith(t, r, docHash(t, ns, "cfg"))
	relabel(t, ns, "cfg")
	relabel(t, ns, "down-cfg")
	unwritten(t, c, r)
	if g := reread(t, c, down).GetGeneration(); g != 1 {
		t.Fatalf("rollout down at generation %d after a label-only change, want 1", g)
	}

	configmaps.SetData(t, env.Client, ns, "cfg", "k", "2")
	configmaps.SetData(t, env.Client, ns, "down-cfg", "k", "2")
	stampedWith(t, expectGeneration(t, c, r, 2, time.Minute), docHash(t, ns, "cfg"))
	stampedWith(t, expectGeneration(t, c, down, 2, time.Minute), docHash(t, ns, "down-cfg"))
}
