package webhook

import (
	"context"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// A malformed review (which the API server never sends) naming a namespace outside the
// scope leaves no log line; inside it, a flood of them is refused, every one counted,
// and logged a few times at most.
func TestHandleMalformedReviewsLogLittle(t *testing.T) {
	inScope := func(_ context.Context, ns string, _ map[string]string) (bool, error) { return ns == "ns", nil }
	undecodable := func(ns string) admission.Request {
		req := request(t, admissionv1.Create, dep(nil, "img", "cfg"), nil)
		req.Namespace, req.Name = ns, "forged-by-anyone"
		req.Object = runtime.RawExtension{Raw: []byte(`{"metadata":{"namespace":"` + ns + `"},"spec":"x"}`)}
		return req
	}
	noUID := func(ns string) admission.Request {
		req := request(t, admissionv1.Create, dep(nil, "img", "cfg"), nil)
		req.Namespace, req.UID = ns, types.UID("")
		return req
	}
	s := &Stamper{InScope: inScope}
	for name, req := range map[string]func(string) admission.Request{"undecodable": undecodable, "no uid": noUID} {
		t.Run(name, func(t *testing.T) {
			var logged int
			resp := s.Handle(contextLogging(&logged), req("kube-system"))
			if logged > 0 {
				t.Errorf("a malformed review naming kube-system wrote %d log line(s)", logged)
			}
			t.Logf("kube-system: allowed=%v code=%d", resp.Allowed, resp.Result.Code)
			rejected := counterValue(admissionRequests.WithLabelValues(resultRejected))
			for i := 0; i < 100; i++ {
				if resp := s.Handle(contextLogging(&logged), req("ns")); resp.Allowed || resp.Result.Code != 400 {
					t.Fatalf("in scope: want refused 400, got %+v", resp)
				}
			}
			if got := counterValue(admissionRequests.WithLabelValues(resultRejected)) - rejected; got != 100 || logged > 5 {
				t.Fatalf("100 malformed reviews in scope: %v counted rejected, %d log lines; want 100, at most 5", got, logged)
			}
			t.Logf("ns: 100 refused, %d log lines", logged)
		})
	}
}
