package badinput

import (
	"bytes"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/events"
	"github.com/configstamp/configstamp/watcher"
)

// padded is a Deployment consuming cfg whose container carries an environment
// variable of n bytes: a pod template of about that size.
func padded(ns, name string, n int) *corev1.PodSpec {
	spec := podWithVolumes("cfg")
	spec.Containers[0].Env = []corev1.EnvVar{{Name: "PAD", Value: strings.Repeat("p", n)}}
	return &spec
}

// testNearSizeLimits sends Deployments near the API server's request limit (3 MiB) and
// etcd's object limit (1.5 MiB): one of 1.3 MiB is stamped; one of 2 MiB goes through
// the webhook (stamped) and is then refused by etcd, not by configstamp; one of 3.5 MiB
// is refused by the API server before admission.
func testNearSizeLimits(t *testing.T, s *suite) {
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "cfg", map[string]string{"k": "v"}))

	d := deployment(ns, "big", *padded(ns, "big", 1100<<10))
	d.Annotations = map[string]string{"pad": strings.Repeat("a", 200<<10)}
	create(t, d)
	waitStamp(t, ns, "big", s.docHash(t, ns, cmSource("cfg")))

	before := len(s.logs("Stamped config hash", "namespace", ns, "name", "over-etcd"))
	err := k8s.Create(bg, deployment(ns, "over-etcd", *padded(ns, "over-etcd", 2<<20)))
	// etcd's answer, or its client's in the API server (a gRPC message over 2 MiB).
	if err == nil || !strings.Contains(err.Error(), "too large") && !strings.Contains(err.Error(), "larger than max") {
		t.Fatalf("a 2 MiB Deployment: want etcd's refusal, got %v", err)
	}
	t.Logf("2 MiB: %v", err)
	s.logRises(t, before, "Stamped config hash", "namespace", ns, "name", "over-etcd")

	before = len(s.cs.Logs())
	err = k8s.Create(bg, deployment(ns, "over-request", *padded(ns, "over-request", 3500<<10)))
	if !apierrors.IsRequestEntityTooLargeError(err) {
		t.Fatalf("a 3.5 MiB Deployment: want the API server's 413, got %v", err)
	}
	for _, rec := range s.cs.Logs()[before:] {
		if rec["name"] == "over-request" {
			t.Fatalf("configstamp saw a request the API server refused: %v", rec)
		}
	}
	if !s.cs.Alive() {
		t.Fatal("configstamp exited")
	}
}

// testAnnotationsAtTheLimit sends Deployments whose annotations are just under the API
// server's limit (256 KiB in all), so that configstamp's stamp (pod template) or record
// (metadata) would push them over; configstamp never makes the API server refuse them.
// A full template is admitted unstamped, with a warning, a log line and
// configstamp_admission_requests_total{result="too_large"}; when its config changes, the
// watcher does not nudge it (a nudge would change nothing) but reports it: a
// StampTooLarge event and configstamp_checks_total{result="too_large"}, no StampBypassed
// event, its generation unchanged; once its template annotations are trimmed, it is
// stamped with its config's current hash. Full metadata is stamped without a record,
// with a log line and configstamp_admission_records_omitted_total.
func testAnnotationsAtTheLimit(t *testing.T, s *suite) {
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "tcfg", map[string]string{"k": "v"}))
	create(t, configMap(ns, "mcfg", map[string]string{"k": "v"}))
	fill := func() map[string]string {
		const key = "pad"
		return map[string]string{key: strings.Repeat("a", apivalidation.TotalAnnotationSizeLimitB-len(key)-20)}
	}
	var warned bytes.Buffer // the API warnings c is sent
	cfg := rest.CopyConfig(env.Cluster.Config)
	cfg.WarningHandler = rest.NewWarningWriter(&warned, rest.WarningWriterOptions{})
	c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}

	// A full pod template: admitted unstamped.
	tooLarge := s.scrape(t)[admissions("too_large")]
	logged := len(s.logs(logTooLargeStamp, "namespace", ns, "name", "full-template"))
	d := deployment(ns, "full-template", podWithVolumes("tcfg"))
	d.Spec.Template.Annotations = fill()
	if err := c.Create(bg, d); err != nil {
		t.Fatalf("full-template: refused: %v", err)
	}
	got := getDeployment(t, ns, "full-template")
	if hashOf(got) != "" || got.Annotations[stamp.ObservedAnnotation] != "" {
		t.Fatalf("full-template: stamped past the annotation limit: %v", hashOf(got))
	}
	if !strings.Contains(warned.String(), "not stamped: its stamp would take the Deployment's pod template annotations past") {
		t.Fatalf("full-template: warnings %q, want configstamp's", warned.String())
	}
	s.logRises(t, logged, logTooLargeStamp, "namespace", ns, "name", "full-template")
	s.metricRises(t, admissions("too_large"), tooLarge)

	// Full metadata: stamped, without a record.
	omitted := s.scrape(t)[recordsOmitted]
	logged = len(s.logs(logNoRecord, "namespace", ns, "name", "full-metadata"))
	d = deployment(ns, "full-metadata", podWithVolumes("mcfg"))
	d.Annotations = fill()
	if err := c.Create(bg, d); err != nil {
		t.Fatalf("full-metadata: refused: %v", err)
	}
	got = getDeployment(t, ns, "full-metadata")
	if want := s.docHash(t, ns, cmSource("mcfg")); hashOf(got) != want {
		t.Fatalf("full-metadata: hash %q, want %q", hashOf(got), want)
	}
	if rec, ok := got.Annotations[stamp.ObservedAnnotation]; ok {
		t.Fatalf("full-metadata: a record past the annotation limit: %q", rec)
	}
	if !strings.Contains(warned.String(), "stamped without its record") {
		t.Fatalf("full-metadata: warnings %q, want configstamp's", warned.String())
	}
	s.logRises(t, logged, logNoRecord, "namespace", ns, "name", "full-metadata")
	s.metricRises(t, recordsOmitted, omitted)

	// The watcher checks the unstamped one after the debounce: it records the config its
	// pods run, or (judging that the webhook was bypassed) finds that it cannot stamp it.
	// Then its config changes: it cannot be stamped, so it is not nudged.
	framework.Eventually(t, 60*time.Second, "full-template checked by the watcher", func() error {
		if getDeployment(t, ns, "full-template").Annotations[stamp.ObservedAnnotation] != "" {
			t.Log("full-template: the watcher recorded the config its pods run")
			return nil
		}
		return findEvent(ns, "full-template", watcher.ReasonStampTooLarge)
	})
	generation := getDeployment(t, ns, "full-template").Generation
	checked := s.scrape(t)[checksTooLarge]
	patch(t, &corev1.ConfigMap{}, ns, "tcfg", `{"data":{"k":"changed"}}`)
	s.metricRises(t, checksTooLarge, checked)
	framework.Eventually(t, 30*time.Second, watcher.ReasonStampTooLarge+" event", func() error {
		return findEvent(ns, "full-template", watcher.ReasonStampTooLarge)
	})
	got = getDeployment(t, ns, "full-template")
	if got.Generation != generation || hashOf(got) != "" {
		t.Fatalf("full-template: generation %d (was %d), hash %q: nudged past the annotation limit", got.Generation, generation, hashOf(got))
	}
	if findEvent(ns, "full-template", watcher.ReasonStampBypassed) == nil {
		t.Fatalf("full-template: a %s event: left unstamped for size is not a bypass", watcher.ReasonStampBypassed)
	}

	// Trimmed (an update of its template): stamped with its config's current hash.
	patch(t, &appsv1.Deployment{}, ns, "full-template", `{"spec":{"template":{"metadata":{"annotations":{"pad":"trimmed"}}}}}`)
	waitStamp(t, ns, "full-template", s.docHash(t, ns, cmSource("tcfg")))
}

const (
	logTooLargeStamp = "Left unstamped: the stamp would exceed the pod template's annotation size limit"
	logNoRecord      = "Stamped without a record: it would exceed the annotation size limit"
	recordsOmitted   = "configstamp_admission_records_omitted_total"
	checksTooLarge   = `configstamp_checks_total{result="too_large"}`
)

// findEvent looks for an Event of reason about the Deployment name.
func findEvent(ns, name, reason string) error {
	return events.Find(k8s, ns, name, reason, "")
}
