package integration

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/events"
	"github.com/configstamp/configstamp/watcher"
)

// settle is how long a negative assertion watches after the debounce (2s) should have
// fired: long enough for a second, unwanted nudge to show.
const settle = 6 * time.Second

func testDataChangeRolls(t *testing.T, cs *framework.Configstamp) {
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "routes", map[string]string{"routes.yaml": "v1"}))
	create(t, configMap(ns, "common", map[string]string{"log": "info"}))
	d := createDeployment(t, ns, "gateway", podWithVolumes("routes", "common"))
	before := digests(d.Spec.Template.Annotations[stamp.SourcesAnnotation])

	setData(t, ns, "routes", "routes.yaml", "v2")
	want := docHash(t, ns, docSource{name: "routes"}, docSource{name: "common"})
	after := rollsOnce(t, d, want)
	now := digests(after.Spec.Template.Annotations[stamp.SourcesAnnotation])
	if now["configmap/routes"] == before["configmap/routes"] || now["configmap/common"] != before["configmap/common"] {
		t.Fatalf("sources annotation does not single out the changed ConfigMap: %v -> %v", before, now)
	}
	framework.Eventually(t, 10*time.Second, "ConfigChanged event", func() error {
		return findEvent(ns, "gateway", watcher.ReasonConfigChanged, "configmap/routes")
	})
}

func findEvent(ns, name, reason, contains string) error {
	return events.Find(k8s, ns, name, reason, contains)
}

func testInvisibleChangesRollNothing(t *testing.T, cs *framework.Configstamp) {
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "partial", map[string]string{"seen": "1", "unseen": "1"}))
	create(t, configMap(ns, "whole", map[string]string{"k": "v"}))
	spec := podWithVolumes("whole")
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "partial", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "partial"}, Items: []corev1.KeyToPath{{Key: "seen", Path: "seen"}}}}})
	d := createDeployment(t, ns, "app", spec)

	setData(t, ns, "partial", "unseen", "2")
	labelled := getConfigMap(t, ns, "whole")
	labelled.Labels = map[string]string{"release": "r2"}
	labelled.Annotations = map[string]string{"note": "only metadata"}
	if err := k8s.Update(bg, labelled); err != nil {
		t.Fatal(err)
	}
	unchanged(t, settle, d)
}

func testMissingCreatedDeleted(t *testing.T, cs *framework.Configstamp) {
	ns := env.NewNamespace(t, true)
	d := createDeployment(t, ns, "app", podWithVolumes("later"))
	if got := d.Spec.Template.Annotations[stamp.SourcesAnnotation]; got != "configmap/later=missing" {
		t.Fatalf("sources with a missing ConfigMap = %q", got)
	}
	missing := hashOf(d)
	create(t, configMap(ns, "later", map[string]string{"k": "v"}))
	present := docHash(t, ns, docSource{name: "later"})
	d2 := rollsOnce(t, d, present)
	if err := k8s.Delete(bg, configMap(ns, "later", nil)); err != nil {
		t.Fatal(err)
	}
	rollsOnce(t, d2, missing)
}

func testBurstWithinDebounce(t *testing.T, cs *framework.Configstamp) {
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "hot", map[string]string{"n": "0"}))
	d := createDeployment(t, ns, "app", podWithVolumes("hot"))
	for i := 1; i <= 10; i++ {
		setData(t, ns, "hot", "n", fmt.Sprint(i))
	}
	rollsOnce(t, d, docHash(t, ns, docSource{name: "hot"}))
}

func testSpacedWritesUnderDebounce(t *testing.T, cs *framework.Configstamp) {
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "drip", map[string]string{"n": "0"}))
	d := createDeployment(t, ns, "app", podWithVolumes("drip"))
	// 8 writes 1s apart span 7s, several debounce windows of 2s: a fixed window from the
	// first event would nudge several times; waiting for quiet nudges once.
	for i := 1; i <= 8; i++ {
		if i > 1 {
			time.Sleep(time.Second)
		}
		setData(t, ns, "drip", "n", fmt.Sprint(i))
		if g := getDeployment(t, ns, "app").Generation; g != d.Generation {
			t.Fatalf("rolled during the burst (after write %d): generation %d -> %d", i, d.Generation, g)
		}
	}
	rollsOnce(t, d, docHash(t, ns, docSource{name: "drip"}))
}

// testConfigThenDeployment is what one helm upgrade does: it writes the ConfigMap, then
// the Deployment half a second later. The webhook stamps the new config on the
// Deployment update; the watcher's later check finds nothing to do.
func testConfigThenDeployment(t *testing.T, cs *framework.Configstamp) {
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "cfg", map[string]string{"v": "1"}))
	d := createDeployment(t, ns, "app", podWithVolumes("cfg"))
	setData(t, ns, "cfg", "v", "2")
	time.Sleep(500 * time.Millisecond)
	cur := getDeployment(t, ns, "app")
	cur.Spec.Template.Spec.Containers[0].Image = "registry.example/app:2"
	if err := k8s.Update(bg, cur); err != nil {
		t.Fatal(err)
	}
	want := docHash(t, ns, docSource{name: "cfg"})
	if hashOf(cur) != want {
		t.Fatalf("Deployment update stamped %q, want the new config's %q", hashOf(cur), want)
	}
	if cur.Generation != d.Generation+1 {
		t.Fatalf("generation %d -> %d", d.Generation, cur.Generation)
	}
	keepsGeneration(t, settle, ns, "app", cur.Generation)
}

// excludedNamespace is excluded by the shared process's --exclude-namespaces.
const excludedNamespace = "t-excluded-scope"

// testExcludedNamespace: a namespace the registration excludes, though it carries the
// opt-in label, gets no admissions, so the watcher sends nothing there either (no
// nudge, no record, no event).
func testExcludedNamespace(t *testing.T, cs *framework.Configstamp) {
	env.CreateNamespace(t, excludedNamespace, true)
	create(t, configMap(excludedNamespace, "cfg", map[string]string{"k": "1"}))
	d := createDeployment(t, excludedNamespace, "app", podWithVolumes("cfg"))
	if hashOf(d) != "" {
		t.Fatal("stamped in an excluded namespace")
	}
	setData(t, excludedNamespace, "cfg", "k", "2")
	unchanged(t, settle, d)
	var events eventsv1.EventList
	if err := k8s.List(bg, &events, client.InNamespace(excludedNamespace)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.ReportingController == "configstamp" || e.Reason == watcher.ReasonStampBypassed {
			t.Fatalf("configstamp recorded an event in an excluded namespace: %s %s", e.Reason, e.Note)
		}
	}
}
