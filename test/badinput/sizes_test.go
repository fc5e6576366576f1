package badinput

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"

	"github.com/configstamp/configstamp/stamp"
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
// (metadata) would push them over: the Deployment is admitted, unstamped, with a warning,
// a log line and configstamp_admission_requests_total{result="too_large"}, never
// refused for configstamp's sake.
func testAnnotationsAtTheLimit(t *testing.T, s *suite) {
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "cfg", map[string]string{"k": "v"}))
	fill := func(extra map[string]string) map[string]string {
		size := 0
		for k, v := range extra {
			size += len(k) + len(v)
		}
		const key = "pad"
		out := map[string]string{key: strings.Repeat("a", apivalidation.TotalAnnotationSizeLimitB-size-len(key)-20)}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}
	for _, c := range []struct {
		name     string
		template bool
	}{{"full-template", true}, {"full-metadata", false}} {
		d := deployment(ns, c.name, podWithVolumes("cfg"))
		if c.template {
			d.Spec.Template.Annotations = fill(nil)
		} else {
			d.Annotations = fill(nil)
		}
		tooLarge := s.scrape(t)[admissions("too_large")]
		logged := len(s.logs(logTooLargeStamp, "namespace", ns, "name", c.name))
		if err := k8s.Create(bg, d); err != nil {
			t.Fatalf("%s: refused: %v", c.name, err)
		}
		got := getDeployment(t, ns, c.name)
		if hashOf(got) != "" || got.Annotations[stamp.ObservedAnnotation] != "" {
			t.Fatalf("%s: stamped past the annotation limit: %v", c.name, got.Spec.Template.Annotations[stamp.HashAnnotation])
		}
		s.logRises(t, logged, logTooLargeStamp, "namespace", ns, "name", c.name)
		s.metricRises(t, admissions("too_large"), tooLarge)
	}
}

const logTooLargeStamp = "Left unstamped: the stamp would exceed the annotation size limit"
