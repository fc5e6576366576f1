package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/apitime"
	"github.com/configstamp/configstamp/watcher"
	"github.com/configstamp/configstamp/webhook"
)

// These tests start and stop configstamp themselves; they run one after another, never
// beside TestWithRunningConfigstamp (top-level tests here are not parallel).

func TestRestartRollsNothing(t *testing.T) {
	first := env.Start(t, framework.Options{})
	ns := env.NewNamespace(t, true)
	createEveryFormConfig(t, ns)
	var deps []*appsv1.Deployment
	deps = append(deps, createDeployment(t, ns, "every", everyForm()))
	deps = append(deps, createDeployment(t, ns, "one", podWithVolumes("vol-all")))
	deps = append(deps, createDeployment(t, ns, "missing", podWithVolumes("nope")))
	for _, d := range deps {
		if hashOf(d) == "" {
			t.Fatalf("%s not stamped", d.Name)
		}
	}
	first.Stop()

	second := env.Start(t, framework.Options{})
	for _, d := range deps {
		unchanged(t, time.Second, d)
	}
	unchanged(t, settle, deps[0])
	for _, rec := range second.Logs() {
		if rec["msg"] == "Nudged Deployment after a config change" {
			t.Fatalf("restart nudged a Deployment: %v", rec)
		}
	}
}

// TestInstallOverExistingDeployments starts configstamp for the first time over
// Deployments that predate it: it records, in their metadata, the config their pods run
// (no rollout; a write that beat dev mode's registration is written again through the
// webhook), and then judges them as precisely as stamped ones.
func TestInstallOverExistingDeployments(t *testing.T) {
	// No configstamp has ever run: no registration.
	deleteRegistration(t)
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "a-config", map[string]string{"k": "1", "other": "x"}))
	create(t, configMap(ns, "b-config", map[string]string{"k": "1"}))
	a := createDeployment(t, ns, "a", podWithVolumes("a-config"))
	b := createDeployment(t, ns, "b", podWithVolumes("b-config"))
	items := createDeployment(t, ns, "items", podWithItems("a-config", "k"))
	if hashOf(a) != "" || hashOf(b) != "" {
		t.Fatal("stamped without configstamp running")
	}

	first := env.Start(t, framework.Options{})
	var recorded []*appsv1.Deployment
	for _, d := range []*appsv1.Deployment{a, b, items} {
		recorded = append(recorded, waitRecord(t, d))
	}
	for _, d := range recorded {
		unchanged(t, time.Second, d) // settled: then nothing
	}

	// Someone else's metadata-only update does not stamp b.
	b = recorded[1].DeepCopy()
	b.Labels = map[string]string{"team": "x"}
	if err := k8s.Update(bg, b); err != nil {
		t.Fatal(err)
	}
	if hashOf(b) != "" || !templateEqual(b, recorded[1]) {
		t.Fatalf("a metadata-only update stamped b: %v", b.Spec.Template.Annotations)
	}

	// A label-only edit: no rollout.
	labelConfigMap(t, ns, "a-config", "edited", "yes")
	templateKept(t, settle, recorded[0], recorded[2])

	// Restarting writes nothing.
	first.Stop()
	second := env.Start(t, framework.Options{})
	unchanged(t, settle, getDeployment(t, ns, "a"))

	// An edit of a key only a sees: a rolls once, items does not (it mounts k alone).
	setData(t, ns, "a-config", "other", "y")
	rollsOnce(t, getDeployment(t, ns, "a"), docHash(t, ns, docSource{name: "a-config"}))
	templateKept(t, time.Second, recorded[2])
	// k: both roll once; b stays as it was.
	setData(t, ns, "a-config", "k", "2")
	rollsOnce(t, getDeployment(t, ns, "items"), docHash(t, ns, docSource{name: "a-config", keys: []string{"k"}}))
	waitStamp(t, ns, "a", docHash(t, ns, docSource{name: "a-config"}))
	templateKept(t, time.Second, getDeployment(t, ns, "b"))

	// A change made while configstamp is stopped is caught once on start, for a
	// Deployment judged by its record as for a stamped one.
	second.Stop()
	setData(t, ns, "b-config", "k", "2")
	// Read before the start: the new watcher may roll it before the test reads it.
	before := getDeployment(t, ns, "b")
	env.Start(t, framework.Options{})
	rollsOnce(t, before, docHash(t, ns, docSource{name: "b-config"}))
}

func TestChangeWhileStoppedRollsOnceOnStart(t *testing.T) {
	first := env.Start(t, framework.Options{})
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "cfg", map[string]string{"k": "1"}))
	create(t, configMap(ns, "other", map[string]string{"k": "1"}))
	d := createDeployment(t, ns, "app", podWithVolumes("cfg"))
	quiet := createDeployment(t, ns, "quiet", podWithVolumes("other"))
	first.Stop()

	setData(t, ns, "cfg", "k", "2")
	env.Start(t, framework.Options{})
	rollsOnce(t, d, docHash(t, ns, docSource{name: "cfg"}))
	unchanged(t, time.Second, quiet)
}

func TestWebhookOutageIsHealed(t *testing.T) {
	port := freePort(t)
	px := framework.NewProxy(t, fmt.Sprintf("127.0.0.1:%d", port))
	env.Start(t, framework.Options{WebhookURL: "https://" + px.Addr, WebhookPort: port})
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "cfg", map[string]string{"k": "1"}))
	existing := createDeployment(t, ns, "existing", podWithVolumes("cfg"))
	if hashOf(existing) == "" {
		t.Fatal("not stamped while the webhook is up")
	}

	px.Stop() // the registration stays; the API server cannot reach the webhook
	during := createDeployment(t, ns, "during", podWithVolumes("cfg"))
	if hashOf(during) != "" {
		t.Fatal("stamped while the webhook is unreachable?")
	}
	setData(t, ns, "cfg", "k", "2")
	framework.Eventually(t, 30*time.Second, "StampBypassed warning", func() error {
		return findEvent(ns, "existing", watcher.ReasonStampBypassed, "")
	})
	if hashOf(getDeployment(t, ns, "existing")) != hashOf(existing) {
		t.Fatal("stamp changed while the webhook was unreachable")
	}

	px.Start(t)
	want := docHash(t, ns, docSource{name: "cfg"})
	for _, name := range []string{"existing", "during"} {
		framework.Eventually(t, 90*time.Second, "healed stamp of "+name, func() error {
			d := getDeployment(t, ns, name)
			if hashOf(d) != want {
				return fmt.Errorf("hash %q, want %q", hashOf(d), want)
			}
			if _, ok := d.Annotations[stamp.NudgeAnnotation]; ok {
				return fmt.Errorf("nudge marker left on the Deployment")
			}
			return nil
		})
	}
}

// deleteRegistration deletes dev mode's registration and the chart's.
func deleteRegistration(t *testing.T) {
	t.Helper()
	for _, name := range []string{webhook.DevConfigurationName, webhook.ConfigurationName} {
		err := k8s.Delete(bg, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}})
		if client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
	// The API server's webhook informer drops the registration shortly after.
	env.CreateNamespace(t, framework.ProbeNamespace, true)
	framework.Eventually(t, 30*time.Second, "registration gone", func() error {
		d := framework.ProbeDeployment()
		if err := k8s.Create(bg, d, client.DryRunAll); err != nil && !strings.Contains(err.Error(), "failed calling webhook") {
			return err
		}
		if hashOf(d) != "" {
			return fmt.Errorf("still stamped")
		}
		return nil
	})
}

// TestRollStaleAtInstall: with --roll-stale-at-install, a Deployment that predates
// configstamp and whose ConfigMap was written after its pods started rolls once at
// install; one whose config is older than its pods only gets its record.
func TestRollStaleAtInstall(t *testing.T) {
	deleteRegistration(t)
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "fresh", map[string]string{"k": "1"}))
	create(t, configMap(ns, "stale", map[string]string{"k": "1"}))
	apitime.NextSecond() // the API server's times have one-second resolution
	fresh := createDeployment(t, ns, "fresh", podWithVolumes("fresh"))
	stale := createDeployment(t, ns, "stale", podWithVolumes("stale"))
	apitime.NextSecond()
	setData(t, ns, "stale", "k", "2")

	// The webhook first (Start returns once the API server calls it), then the watcher:
	// in one process the watcher's nudge may reach the API server before the webhook
	// dev mode registers is called, a bypass written again (one more generation).
	env.Start(t, framework.Options{Args: []string{"--role", "webhook"}})
	env.Start(t, framework.Options{NoWebhook: true,
		Args: []string{"--role", "watcher", "--registration-name", webhook.DevConfigurationName, "--roll-stale-at-install"}})
	rollsOnce(t, stale, docHash(t, ns, docSource{name: "stale"}))
	templateKept(t, time.Second, waitRecord(t, fresh))
}
