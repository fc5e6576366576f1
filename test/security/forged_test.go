package security

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/configstamp/configstamp/test/internal/reviews"
)

// forgedCase is one forged review, the namespaces configstamp must not read for it, and
// whether it is outside the scope altogether (then it must not even log the namespace,
// nor say anything in warnings or audit annotations).
type forgedCase struct {
	name       string
	review     forged
	never      []string
	outOfScope bool
	// quiet: the answer must carry no warning and no audit annotation (what exists
	// elsewhere must not leak through them).
	quiet bool
}

func forgedCases() []forgedCase {
	sensitive := func(reqNS, objNS string) forged {
		return forged{reqNS: reqNS, objNS: objNS, name: "forged", cms: []string{flags}, secrets: []string{"db", "other"}}
	}
	return []forgedCase{
		{name: "object in kube-system", review: sensitive(excluded, excluded), never: []string{excluded}, outOfScope: true, quiet: true},
		{name: "kube-system object from attacker", review: sensitive(attacker, excluded), never: []string{excluded}, quiet: true},
		{name: "namespace not opted in", review: sensitive(notOptedIn, notOptedIn), never: []string{notOptedIn}, outOfScope: true, quiet: true},
		{name: "victim object from attacker", review: sensitive(attacker, victim), never: []string{victim}, quiet: true},
		{name: "1000 sources", review: forged{reqNS: crowded, objNS: crowded, name: "forged", cms: sources(1000)}, never: []string{crowded}},
		{name: "5 MiB body", review: forged{reqNS: bulky, objNS: bulky, name: "forged", cms: []string{"cfg"}, size: 5 << 20}, never: []string{bulky}},
	}
}

// testForgedReviews posts each forged review alone: answered allowed with no patch, no
// read where it must not read, and, outside the scope, no log line naming the
// namespace.
func (s *suite) testForgedReviews(t *testing.T) {
	for _, c := range forgedCases() {
		t.Run(c.name, func(t *testing.T) {
			body := c.review.body()
			mark, logs := auditMark(), s.logMark()
			a := reviews.Post(s.hc, s.url, body)
			t.Logf("%d bytes answered in %v (HTTP %d; the registration's timeout: %v)", len(body), a.Took.Round(time.Millisecond), a.Code, s.timeout)
			if err := a.AllowedUntouched(); err != nil {
				t.Error(err)
			}
			if r := a.Response(); c.quiet && r != nil && (len(r.Warnings) > 0 || len(r.AuditAnnotations) > 0 || r.Result != nil && r.Result.Message != "") {
				t.Errorf("the answer tells something: warnings %q, audit annotations %v, result %+v", r.Warnings, r.AuditAnnotations, r.Result)
			}
			out := s.settle(t, logs)
			s.noReads(t, mark, c.never...)
			if c.outOfScope {
				noLogLines(t, out, c.review.objNS)
			}
		})
	}
}

// testFiftyAtOnce posts 50 of the forged reviews at once, the cases in turn: each is
// answered (a review that allows without a patch, or a refusal to take more work at
// once, 429 or 503, which the API server would treat as the webhook failing open); no
// read where any must not read; no log line naming a namespace outside the scope.
func (s *suite) testFiftyAtOnce(t *testing.T) {
	cases := forgedCases()
	bodies := make([][]byte, len(cases))
	for i, c := range cases {
		bodies[i] = c.review.body()
	}
	mark, logs := auditMark(), s.logMark()
	answers := make([]reviews.Answer, 50)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range answers {
		wg.Go(func() { answers[i] = reviews.Post(s.hc, s.url, bodies[i%len(bodies)]) })
	}
	wg.Wait()
	t.Logf("50 forged reviews at once: all answered within %v (the registration's timeout: %v)", time.Since(start).Round(time.Millisecond), s.timeout)
	var slowest time.Duration
	for i, a := range answers {
		slowest = max(slowest, a.Took)
		if a.Err == nil && a.Review == nil && (a.Code == http.StatusTooManyRequests || a.Code == http.StatusServiceUnavailable) {
			continue
		}
		if err := a.AllowedUntouched(); err != nil {
			t.Errorf("%s: %v", cases[i%len(cases)].name, err)
		}
	}
	t.Logf("slowest answer: %v", slowest.Round(time.Millisecond))
	out := s.settle(t, logs)
	var never, outside []string
	for _, c := range cases {
		never = append(never, c.never...)
		if c.outOfScope {
			outside = append(outside, c.review.objNS)
		}
	}
	s.noReads(t, mark, never...)
	noLogLines(t, out, outside...)
}
