package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// countingReader fails every read and counts them.
func countingReader(reads *atomic.Int32) client.Reader {
	return readerFailingWith(func() error { reads.Add(1); return errors.New("read") })
}

// Reviews outside their boundaries are answered allowed, with no patch, no read, no
// log line, counted by why.
func TestHandleOutsideItsBoundaries(t *testing.T) {
	inScope := func(_ context.Context, ns string, objLabels map[string]string) (bool, error) {
		switch ns {
		case "unknown":
			return false, errors.New("not synced")
		case "ns":
			return true, nil
		}
		return objLabels["opt"] == "in", nil
	}
	other := dep(nil, "img", "cfg")
	other.Namespace = "kube-system"
	labelled := dep(nil, "img", "cfg")
	labelled.Labels = map[string]string{"opt": "in"}
	for _, tc := range []struct {
		name     string
		req      func() admission.Request
		result   string
		warnings int
	}{
		{"object in another namespace", func() admission.Request { return request(t, admissionv1.Create, other, nil) }, resultNamespaceMismatch, 0},
		{"old object in another namespace", func() admission.Request {
			return request(t, admissionv1.Update, dep(nil, "img", "cfg"), other)
		}, resultNamespaceMismatch, 0},
		{"no request namespace", func() admission.Request {
			r := request(t, admissionv1.Create, dep(nil, "img", "cfg"), nil)
			r.Namespace = ""
			return r
		}, resultNamespaceMismatch, 0},
		{"namespace not opted in", func() admission.Request {
			return rewriteNamespace(t, request(t, admissionv1.Create, dep(nil, "img", "cfg"), nil), "off")
		}, resultOutOfScope, 0},
		{"scope unknown", func() admission.Request {
			return rewriteNamespace(t, request(t, admissionv1.Create, dep(nil, "img", "cfg"), nil), "unknown")
		}, resultScopeUnknown, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reads atomic.Int32
			s := &Stamper{Reader: countingReader(&reads), InScope: inScope}
			before := counterValue(admissionRequests.WithLabelValues(tc.result))
			var logged int
			resp := s.Handle(contextLogging(&logged), tc.req())
			if !resp.Allowed || len(resp.Patches) != 0 || len(resp.Warnings) != tc.warnings || reads.Load() != 0 || logged != 0 {
				t.Fatalf("want allowed, no patch, %d warnings, no read, no log line; got %+v, %d reads, %d lines", tc.warnings, resp, reads.Load(), logged)
			}
			if got := counterValue(admissionRequests.WithLabelValues(tc.result)); got != before+1 {
				t.Fatalf("%s counted %v times", tc.result, got-before)
			}
		})
	}

	// A workload that opts in by its label, in a namespace that does not: read. So is
	// an UPDATE that removes the label (the registration matches the old object too).
	for _, req := range []admission.Request{
		request(t, admissionv1.Create, labelled, nil),
		request(t, admissionv1.Update, dep(nil, "img:2", "cfg"), labelled),
	} {
		var reads atomic.Int32
		(&Stamper{Reader: countingReader(&reads), InScope: inScope, Key: testKey}).Handle(context.Background(), rewriteNamespace(t, req, "off"))
		if reads.Load() == 0 {
			t.Fatalf("%s of a labelled workload: not read", req.Operation)
		}
	}
}

// rewriteNamespace sets the namespace of the request and its objects.
func rewriteNamespace(t *testing.T, req admission.Request, ns string) admission.Request {
	t.Helper()
	req.Namespace = ns
	req.Object.Raw = []byte(strings.Replace(string(req.Object.Raw), `"namespace":"ns"`, `"namespace":"`+ns+`"`, 1))
	req.OldObject.Raw = []byte(strings.Replace(string(req.OldObject.Raw), `"namespace":"ns"`, `"namespace":"`+ns+`"`, 1))
	return req
}

// Past the source cap nothing is read: a CREATE is admitted unstamped, an UPDATE of a
// stamped workload keeps its stamp, each with a warning naming the cap.
func TestHandleTooManySources(t *testing.T) {
	names := make([]string, 5)
	for i := range names {
		names[i] = fmt.Sprintf("cfg%d", i)
	}
	var reads atomic.Int32
	s := &Stamper{Reader: countingReader(&reads), Sources: stamp.Options{MaxSources: 4}, Key: testKey}
	before := counterValue(admissionRequests.WithLabelValues(resultTooManySources))
	resp := s.Handle(context.Background(), request(t, admissionv1.Create, dep(nil, "img", names...), nil))
	if !resp.Allowed || len(resp.Patches) != 0 || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "cap of 4") {
		t.Fatalf("CREATE: want allowed unstamped with a warning naming the cap; got %+v", resp)
	}
	stored := map[string]string{stamp.HashAnnotation: "old", stamp.SourcesAnnotation: "configmap/cfg0=1"}
	resp = s.Handle(context.Background(), request(t, admissionv1.Update, dep(nil, "img:2", names...), dep(stored, "img", names...)))
	if !resp.Allowed || len(resp.Patches) != 1 || len(resp.Warnings) != 1 {
		t.Fatalf("UPDATE: want the stored stamp put back with a warning; got %+v", resp)
	}
	if m := resp.Patches[0].Value.(map[string]string); m[stamp.HashAnnotation] != "old" {
		t.Fatalf("UPDATE: stamp %v, want the stored one", m)
	}
	if reads.Load() != 0 {
		t.Fatalf("%d reads past the cap", reads.Load())
	}
	if got := counterValue(admissionRequests.WithLabelValues(resultTooManySources)); got != before+2 {
		t.Fatalf("too_many_sources counted %v times, want 2", got-before)
	}
	// At the cap: read.
	s.Sources.MaxSources = 5
	s.Handle(context.Background(), request(t, admissionv1.Create, dep(nil, "img", names...), nil))
	if reads.Load() == 0 {
		t.Fatal("at the cap: not read")
	}
}

// The guard answers a body over the cap 413 and a request without a slot 429, neither
// read nor handed to the webhook.
func TestGuard(t *testing.T) {
	var served atomic.Int32
	wh := &admission.Webhook{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		served.Add(1)
		return admission.Allowed("")
	})}
	g := &guard{wh: wh, maxBytes: 100, slots: make(chan struct{}, 1)}
	post := func(body string) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		g.ServeHTTP(rec, req)
		return rec.Code
	}
	review := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u"}}`
	rejected := counterValue(admissionRequests.WithLabelValues(resultRejected))
	if code := post(review + strings.Repeat(" ", 100)); code != http.StatusRequestEntityTooLarge || served.Load() != 0 {
		t.Fatalf("over the cap: HTTP %d, served %d; want 413 unserved", code, served.Load())
	}
	if got := counterValue(admissionRequests.WithLabelValues(resultRejected)); got != rejected+1 {
		t.Fatalf("over the cap counted %v times as rejected", got-rejected)
	}
	if code := post(review); code != http.StatusOK || served.Load() != 1 {
		t.Fatalf("under the cap: HTTP %d, served %d", code, served.Load())
	}
	g.slots <- struct{}{} // the one slot taken
	start := time.Now()
	if code := post(review); code != http.StatusTooManyRequests || served.Load() != 1 {
		t.Fatalf("no slot: HTTP %d, served %d; want 429 unserved", code, served.Load())
	}
	if waited := time.Since(start); waited < slotWait || waited > slotWait+time.Second {
		t.Fatalf("waited %v for a slot, want about %v", waited, slotWait)
	}
	<-g.slots
	if code := post(review); code != http.StatusOK {
		t.Fatalf("slot free again: HTTP %d", code)
	}
}

// contextLogging is a context whose logger counts its lines in n.
func contextLogging(n *int) context.Context {
	var mu sync.Mutex
	return logr.NewContext(context.Background(), funcr.New(func(_, _ string) {
		mu.Lock()
		defer mu.Unlock()
		*n++
	}, funcr.Options{}))
}

// A body of unknown length is cut at the cap; an empty one reaches controller-runtime as
// empty.
func TestGuardUnknownLengthAndEmpty(t *testing.T) {
	g := &guard{wh: &admission.Webhook{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		return admission.Allowed("")
	})}, maxBytes: 100, slots: make(chan struct{}, 1)}
	for _, tc := range []struct {
		name, body string
		length     int64
		want       string
	}{
		{"unknown length over the cap", `{"request":{"uid":"` + strings.Repeat("u", 200) + `"}}`, -1, "http: request body too large"},
		{"empty", "", 0, "request body is empty"},
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tc.body))
		req.ContentLength = tc.length
		if tc.length == 0 {
			req.Body = http.NoBody
		}
		req.Header.Set("Content-Type", "application/json")
		g.ServeHTTP(rec, req)
		if !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("%s: answer %q, want %q", tc.name, rec.Body.String(), tc.want)
		}
	}
}

// Jobs' admissions take at most half the slots (kindGuards): with that half in use, a
// Job's review finds no slot (429, admitted unstamped) while a Deployment's is served.
func TestGuardJobsLeaveOtherKindsTheirSlots(t *testing.T) {
	wh := &admission.Webhook{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		return admission.Allowed("")
	})}
	g := &guard{wh: wh, maxBytes: DefaultMaxRequestBytes, slots: make(chan struct{}, 4)}
	guards := kindGuards(g, workload.Builtin())
	jobs, deployments := guards[workload.Job.Path()], guards[workload.Deployment.Path()]
	if deployments != g || guards[workload.CronJob.Path()] != g || jobs == g || jobs.slots != g.slots {
		t.Fatalf("guards: %v", guards)
	}
	post := func(h *guard) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u"}}`))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	// Two Jobs' reviews in flight: half the slots.
	for range 2 {
		if !jobs.acquire(context.Background()) {
			t.Fatal("a Job's review found no slot with half of them free")
		}
	}
	if code := post(jobs); code != http.StatusTooManyRequests {
		t.Errorf("a third Job's review: HTTP %d, want 429", code)
	}
	if code := post(deployments); code != http.StatusOK {
		t.Errorf("a Deployment's review beside two Jobs': HTTP %d, want 200", code)
	}
	jobs.release()
	if code := post(jobs); code != http.StatusOK {
		t.Errorf("a Job's review once one ended: HTTP %d, want 200", code)
	}
	jobs.release()
	if len(g.slots) != 0 || len(jobs.share) != 0 {
		t.Errorf("slots left taken: %d, %d", len(g.slots), len(jobs.share))
	}
}
