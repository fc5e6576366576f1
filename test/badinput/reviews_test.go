package badinput

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/webhook"
)

// Log messages of rejected reviews: controller-runtime's, for bodies that are no
// AdmissionReview, and configstamp's, for reviews it cannot act on.
const (
	logUndecodable = "unable to decode the request"
	logEmptyBody   = "bad request"
	logContentType = "unable to process a request with unknown content type"
	logTooLarge    = "unable to read the body from the incoming request; limit reached"
	logNoRequest   = "Rejected malformed admission review"
	logBadObject   = "Rejected undecodable object"
	logBadOld      = "Rejected undecodable old object"
)

// testMalformedReviews posts malformed and truncated AdmissionReviews straight to the
// webhook port, over HTTPS with the CA of the registration: each gets a clear error
// answer (an errored review, never a 5xx or a dropped connection; a body over the cap a
// 413, which the API server treats as a failed call and admits), a log line (none for
// one with no namespace, outside the scope; a few at most for a flood) and
// exactly one count of configstamp_admission_requests_total{result="rejected"}; a review of another kind of
// object is admitted untouched; configstamp still stamps a good review afterwards.
func testMalformedReviews(t *testing.T, s *suite) {
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "cfg", map[string]string{"k": "v"}))
	hc := webhookClient(t)
	url := fmt.Sprintf("https://127.0.0.1:%d%s", s.cs.WebhookPort, webhook.Path)
	good := deployment(ns, "direct", podWithVolumes("cfg"))
	goodRaw, _ := json.Marshal(good)
	valid := review(ns, admissionv1.Create, goodRaw, nil)
	nested := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"n","object":` +
		strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}}`
	huge := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"h","name":"` + strings.Repeat("x", 8<<20) + `"}}`
	garbage := make([]byte, 4096)
	for i := range garbage {
		garbage[i] = byte(i*7919 + i/13)
	}
	bad := []struct {
		name, contentType, body, msg string
	}{
		{"garbage bytes", "application/json", string(garbage), logUndecodable},
		{"truncated JSON", "application/json", valid[:len(valid)/2], logUndecodable},
		{"truncated after the object", "application/json", valid[:len(valid)-3], logUndecodable},
		{"empty body", "application/json", "", logEmptyBody},
		{"not JSON content type", "text/plain", valid, logContentType},
		{"uid a number", "application/json", strings.Replace(valid, `"uid":"bad-input"`, `"uid":42`, 1), logUndecodable},
		{"deeply nested", "application/json", nested, logUndecodable},
		{"huge body", "application/json", huge, ""}, // over --webhook-max-request-bytes: 413, unread and unlogged
		{"no request", "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, logNoRequest},
		{"no uid", "application/json", strings.Replace(valid, `"uid":"bad-input",`, "", 1), logNoRequest},
		{"object of wrong types", "application/json", review(ns, admissionv1.Create, []byte(`{"spec":{"replicas":"many"}}`), nil), logBadObject},
		{"no object", "application/json", review(ns, admissionv1.Create, nil, nil), logBadObject},
		{"object truncated", "application/json", strings.Replace(valid, string(goodRaw), string(goodRaw[:len(goodRaw)/2]), 1), logUndecodable},
		{"old object of wrong types", "application/json", review(ns, admissionv1.Update, goodRaw, []byte(`{"metadata":{"name":7}}`)), logBadOld},
	}
	rejectedBefore := s.scrape(t)[admissions(resultRejected)]
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			rejected, logged := s.scrape(t)[admissions(resultRejected)], len(s.logs(c.msg))
			code, body := post(t, hc, url, c.contentType, []byte(c.body))
			if c.msg == "" {
				if code != http.StatusRequestEntityTooLarge || len(s.logs(logTooLarge)) != 0 {
					t.Fatalf("HTTP %d, want 413 with no log line: %.300s", code, body)
				}
				s.metricRises(t, admissions(resultRejected), rejected)
				return
			}
			if code != http.StatusOK {
				t.Fatalf("HTTP %d, want 200 with an errored review: %.300s", code, body)
			}
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(body, &out); err != nil || out.Response == nil || out.Response.Allowed ||
				out.Response.Result == nil || out.Response.Result.Code < 400 || out.Response.Result.Code >= 500 || out.Response.Result.Message == "" {
				t.Fatalf("want an errored review (4xx, with a message), got %.300s", body)
			}
			t.Logf("answer: %d %.200s", out.Response.Result.Code, out.Response.Result.Message)
			if c.name == "no request" {
				// No namespace: outside the scope, so not logged (a flood of forged
				// reviews must not fill the log); counted all the same.
				s.metricRises(t, admissions(resultRejected), rejected)
				if n := len(s.logs(c.msg)); n != logged {
					t.Fatalf("logged %d line(s) %q, want none", n-logged, c.msg)
				}
			} else {
				s.logRises(t, logged, c.msg)
			}
			s.metricRises(t, admissions(resultRejected), rejected)
			if got := s.scrape(t)[admissions(resultRejected)]; got != rejected+1 {
				t.Fatalf("rejected rose from %v to %v: want one count per request", rejected, got)
			}
		})
	}
	// Counted once each, also where a second count would come after the answer (the
	// handler counts before it answers, the server wrapper after).
	if got := s.scrape(t)[admissions(resultRejected)]; got != rejectedBefore+float64(len(bad)) {
		t.Fatalf("%d malformed requests counted %v times as rejected", len(bad), got-rejectedBefore)
	}

	// A review under another apiVersion or kind is decoded by controller-runtime all
	// the same (it reads the type leniently) and answered under what it was sent as; the
	// API server sends only admission.k8s.io/v1 (or v1beta1) AdmissionReviews.
	for _, body := range []string{
		strings.Replace(valid, "admission.k8s.io/v1", "admission.k8s.io/v2", 1),
		strings.Replace(strings.Replace(valid, "admission.k8s.io/v1", "v1", 1), `"AdmissionReview"`, `"Pod"`, 1),
	} {
		var out admissionv1.AdmissionReview
		if code, answer := post(t, hc, url, "application/json", []byte(body)); code != http.StatusOK || json.Unmarshal(answer, &out) != nil || out.Response == nil {
			t.Fatalf("a review of another apiVersion or kind: want an answer, got %d %.300s", code, answer)
		}
	}

	// A review whose object is not a Deployment (a ConfigMap) decodes as a Deployment
	// without a pod template: admitted untouched. The API server only sends objects of
	// the kind the review names.
	cmRaw, _ := json.Marshal(configMap(ns, "cfg", map[string]string{"k": "v"}))
	code, body := post(t, hc, url, "application/json", []byte(review(ns, admissionv1.Create, cmRaw, nil)))
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &out); code != http.StatusOK || err != nil || out.Response == nil || !out.Response.Allowed || len(out.Response.Patch) != 0 {
		t.Fatalf("a ConfigMap as the object: want admitted untouched, got %d %.300s", code, body)
	}

	if !s.cs.Alive() {
		t.Fatal("configstamp exited")
	}
	code, body = post(t, hc, url, "application/json", []byte(valid))
	out = admissionv1.AdmissionReview{}
	if err := json.Unmarshal(body, &out); code != http.StatusOK || err != nil || out.Response == nil || !out.Response.Allowed ||
		len(out.Response.Patch) == 0 || out.Response.AuditAnnotations[webhook.AuditHash] != s.docHash(t, ns, cmSource("cfg")) {
		t.Fatalf("a valid review after the bad ones: want stamped, got %d %.300s", code, body)
	}
}

const resultRejected = "rejected"

// review is an AdmissionReview of a Deployment as the API server sends it.
func review(ns string, op admissionv1.Operation, obj, old []byte) string {
	r := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "bad-input", Kind: metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			Resource:  metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
			Operation: op, Namespace: ns, Name: "direct",
			Object: runtime.RawExtension{Raw: obj}, OldObject: runtime.RawExtension{Raw: old},
		},
	}
	b, _ := json.Marshal(r)
	return string(b)
}

// webhookClient trusts the CA the dev registration gives the API server.
func webhookClient(t *testing.T) *http.Client {
	t.Helper()
	var reg admissionregistrationv1.MutatingWebhookConfiguration
	if err := k8s.Get(bg, client.ObjectKey{Name: webhook.DevConfigurationName}, &reg); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(reg.Webhooks[0].ClientConfig.CABundle) {
		t.Fatal("no CA in the registration")
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

func post(t *testing.T, hc *http.Client, url, contentType string, body []byte) (int, []byte) {
	t.Helper()
	resp, err := hc.Post(url, contentType, bytes.NewReader(body))
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	return resp.StatusCode, b
}
