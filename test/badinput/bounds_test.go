package badinput

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/test/bench"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/promtext"
	"github.com/configstamp/configstamp/webhook"
)

// TestBounds posts forged reviews straight to the webhook port, as a pod could, to a
// configstamp of its own (its metrics counted one case at a time): each is answered
// within the registration's timeout without reading what it names: an object in
// another namespace than the request's, a review in an excluded namespace (kube-system)
// and in one not opted in (no read in the API server's audit log, no log line), 1,000
// sources (over --max-sources; and through the API server, 300: unstamped, unread, an
// Event TooManySources from the watcher), a 5 MiB body (over --webhook-max-request-bytes: 413
// unread), and 50 at once (never more in flight than --webhook-max-in-flight).
func TestBounds(t *testing.T) {
	s := &suite{metrics: freeAddr(t)}
	s.cs = env.Start(t, framework.Options{Args: []string{"--metrics-bind-address", s.metrics, "--webhook-max-in-flight", "4"}})
	hc := webhookClient(t)
	url := fmt.Sprintf("https://127.0.0.1:%d%s", s.cs.WebhookPort, webhook.Path)
	attacker := env.NewNamespace(t, true)
	s.attacker = attacker
	create(t, configMap(attacker, "cfg", map[string]string{"k": "v"}))
	victim := env.NewNamespace(t, false)
	create(t, configMap(victim, "cfg", map[string]string{"pin": "4711"}))
	env.CreateNamespace(t, "kube-system", false)
	create(t, configMap("kube-system", "feature-flags", map[string]string{"admin-pin": "4711"}))

	t.Run("ObjectInAnotherNamespace", func(t *testing.T) {
		d := deployment(victim, "direct", podWithVolumes("cfg"))
		s.unread(t, hc, url, review(attacker, admissionv1.Create, raw(t, d), nil), "namespace_mismatch", victim, attacker)
	})
	t.Run("ExcludedNamespace", func(t *testing.T) {
		d := deployment("kube-system", "direct", podWithVolumes("feature-flags"))
		d.Labels = map[string]string{"configstamp.io/inject": "enabled"} // opting in by label does not open an excluded namespace
		s.unread(t, hc, url, review("kube-system", admissionv1.Create, raw(t, d), nil), "out_of_scope", "kube-system")
	})
	t.Run("NamespaceNotOptedIn", func(t *testing.T) {
		d := deployment(victim, "direct", podWithVolumes("cfg"))
		s.unread(t, hc, url, review(victim, admissionv1.Create, raw(t, d), nil), "out_of_scope", victim)
	})
	t.Run("ThousandSources", func(t *testing.T) {
		names := make([]string, 1000)
		for i := range names {
			names[i] = fmt.Sprintf("cfg-%d", i)
		}
		d := deployment(attacker, "direct", podWithVolumes(names...))
		out := s.unread(t, hc, url, review(attacker, admissionv1.Create, raw(t, d), nil), "too_many_sources", attacker)
		if len(out.Warnings) != 1 || !strings.Contains(out.Warnings[0], "cap of 256") {
			t.Fatalf("warnings %q, want one naming the cap", out.Warnings)
		}
	})
	t.Run("TooManySourcesThroughTheAPIServer", func(t *testing.T) {
		// A real create: admitted unstamped with nothing read; the watcher reports it.
		names := make([]string, 300)
		for i := range names {
			names[i] = fmt.Sprintf("cfg-%d", i)
		}
		checked, mark := s.scrape(t)[checksTooMany], auditMark()
		create(t, deployment(attacker, "many", podWithVolumes(names...)))
		if h := hashOf(getDeployment(t, attacker, "many")); h != "" {
			t.Fatalf("stamped %q past the source cap", h)
		}
		framework.Eventually(t, 60*time.Second, "TooManySources event", func() error {
			return findEvent(attacker, "many", "TooManySources")
		})
		s.metricRises(t, checksTooMany, checked)
		if evs := reads(t, mark, "configmaps", attacker); len(evs) != 0 {
			t.Fatalf("configstamp read %d ConfigMaps of a workload past the cap", len(evs))
		}
	})
	t.Run("FiveMiBBody", func(t *testing.T) {
		d := deployment(attacker, "direct", podWithVolumes("cfg"))
		d.Annotations = map[string]string{"pad": strings.Repeat("x", 5<<20)}
		before, tooLarge, logged := s.scrape(t), s.scrape(t)[bodiesTooLarge], len(s.cs.Logs())
		mark := auditMark()
		start := time.Now()
		code, body := post(t, hc, url, "application/json", []byte(review(attacker, admissionv1.Create, raw(t, d), nil)))
		if code != http.StatusRequestEntityTooLarge || time.Since(start) > webhook.DefaultTimeout*time.Second {
			t.Fatalf("a 5 MiB review: HTTP %d after %v, want 413 within the timeout: %.200s", code, time.Since(start), body)
		}
		after := s.scrape(t)
		if after[admissions(resultRejected)] != before[admissions(resultRejected)]+1 || after[bodiesTooLarge] != tooLarge+1 {
			t.Fatalf("rejected %v -> %v, %s %v -> %v: want one more of each", before[admissions(resultRejected)], after[admissions(resultRejected)],
				bodiesTooLarge, tooLarge, after[bodiesTooLarge])
		}
		s.noTrace(t, mark, logged, attacker)
	})
	t.Run("FiftyAtOnce", func(t *testing.T) {
		// Each about 1 MiB, in scope: read and stamped, or turned away unread.
		d := deployment(attacker, "direct", *padded(attacker, "direct", 1<<20))
		body := []byte(review(attacker, admissionv1.Create, raw(t, d), nil))
		stop := s.peakInFlight()
		var wg sync.WaitGroup
		codes, slow := make([]int, 50), make([]time.Duration, 50)
		for i := range codes {
			wg.Go(func() {
				start := time.Now()
				if resp, err := hc.Post(url, "application/json", bytes.NewReader(body)); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					codes[i] = resp.StatusCode
				}
				slow[i] = time.Since(start)
			})
		}
		wg.Wait()
		p := stop()
		for i, c := range codes {
			if c != http.StatusOK && c != http.StatusTooManyRequests || slow[i] > webhook.DefaultTimeout*time.Second {
				t.Fatalf("request %d: HTTP %d after %v, want 200 or 429 within the timeout", i, c, slow[i])
			}
		}
		if p < 1 || p > 4 {
			t.Fatalf("%s peaked at %v, want 1 to 4 (--webhook-max-in-flight 4)", inFlight, p)
		}
		t.Logf("50 at once: in flight at most %v; codes %v", p, codes)
	})
	if !s.cs.Alive() {
		t.Fatal("configstamp exited")
	}
}

const (
	checksTooMany  = `configstamp_checks_total{result="too_many_sources"}`
	bodiesTooLarge = "configstamp_admission_bodies_too_large_total"
	inFlight       = "configstamp_admissions_in_flight"
)

func raw(t *testing.T, d *appsv1.Deployment) []byte {
	t.Helper()
	d.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// unread posts a review until it is counted as result (a namespace just created may at
// first be unknown to configstamp's namespace cache), and checks each answer: allowed,
// no patch, within the timeout; and no read and no log line about the namespaces.
func (s *suite) unread(t *testing.T, hc *http.Client, url, body, result string, namespaces ...string) *admissionv1.AdmissionResponse {
	t.Helper()
	mark, logged := auditMark(), len(s.cs.Logs())
	var out admissionv1.AdmissionReview
	framework.Eventually(t, 20*time.Second, "counted as "+result, func() error {
		before := s.scrape(t)[admissions(result)]
		start := time.Now()
		code, answer := post(t, hc, url, "application/json", []byte(body))
		out = admissionv1.AdmissionReview{}
		if err := json.Unmarshal(answer, &out); code != http.StatusOK || err != nil || out.Response == nil || !out.Response.Allowed ||
			len(out.Response.Patch) != 0 || time.Since(start) > webhook.DefaultTimeout*time.Second {
			t.Fatalf("want allowed with no patch within the timeout; got HTTP %d after %v: %.300s", code, time.Since(start), answer)
		}
		if s.scrape(t)[admissions(result)] != before+1 {
			return fmt.Errorf("not counted as %s (warnings %q)", result, out.Response.Warnings)
		}
		return nil
	})
	s.noTrace(t, mark, logged, namespaces...)
	return out.Response
}

// noTrace checks that configstamp read no ConfigMap or Secret in namespaces after mark
// (the API server's audit log), and that its webhook logged nothing after the logged'th
// line (its lines carry the requestID), nor anything else about a namespace not opted
// in.
func (s *suite) noTrace(t *testing.T, mark bench.AuditMark, logged int, namespaces ...string) {
	t.Helper()
	for _, ns := range namespaces {
		for _, res := range []string{"configmaps", "secrets"} {
			if evs := reads(t, mark, res, ns); len(evs) != 0 {
				t.Fatalf("configstamp read %d %s in %s", len(evs), res, ns)
			}
		}
	}
	for _, rec := range s.cs.Logs()[logged:] {
		line, _ := json.Marshal(rec)
		if _, ok := rec["requestID"]; ok {
			t.Fatalf("configstamp's webhook logged: %s", line)
		}
		for _, ns := range namespaces {
			if ns != s.attacker && strings.Contains(string(line), ns) {
				t.Fatalf("configstamp logged about %s: %s", ns, line)
			}
		}
	}
}

// peakInFlight samples configstamp_admissions_in_flight until stop, which returns the
// largest value seen.
func (s *suite) peakInFlight() (stop func() float64) {
	var mu sync.Mutex
	best := 0.0
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			m, err := promtext.Scrape(http.DefaultClient, s.metrics)
			if err != nil {
				continue
			}
			v := m[inFlight]
			mu.Lock()
			best = max(best, v)
			mu.Unlock()
		}
	}()
	return func() float64 {
		close(done)
		<-finished
		mu.Lock()
		defer mu.Unlock()
		return best
	}
}
