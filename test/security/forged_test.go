package security

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/configstamp/configstamp/test/internal/reviews"
)

// forgedCase is one forged review and the namespaces configstamp must not read for it.
type forgedCase struct {
	name   string
	review forged
	never  []string
	// outOfScope: the review's namespace (request and object) is outside configstamp's
	// scope: no log line may name it.
	outOfScope bool
	// refusals are the HTTP codes that may answer it instead of a review: a refusal the
	// API server treats as the webhook failing, admitting unstamped (failurePolicy
	// Ignore), which tells the poster nothing.
	refusals []int
	// quiet: the answer must say nothing of the sources named (what exists elsewhere
	// must not leak through warnings, messages or audit annotations).
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
		{name: "5 MiB body", review: forged{reqNS: bulky, objNS: bulky, name: "forged", cms: []string{"cfg"}, size: 5 << 20}, never: []string{bulky},
			refusals: []int{http.StatusRequestEntityTooLarge}},
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
			if err := admittedUntouched(a, c.refusals...); err != nil {
				t.Error(err)
			}
			if c.quiet {
				if err := tellsNothing(a); err != nil {
					t.Error(err)
				}
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
// answered (a review that allows without a patch, or a refusal: of its size, or to take
// more work at once, 429 or 503); no read where any must not read; no log line naming
// a namespace outside the scope.
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
	failed := map[string][]error{}
	for i, a := range answers {
		slowest = max(slowest, a.Took)
		c := cases[i%len(cases)]
		if err := admittedUntouched(a, append(c.refusals, busy...)...); err != nil {
			failed[c.name] = append(failed[c.name], err)
		} else if err := tellsNothing(a); c.quiet && err != nil {
			failed[c.name] = append(failed[c.name], err)
		}
	}
	for name, errs := range failed {
		t.Errorf("%s: %d of its answers fail; first: %v", name, len(errs), errs[0])
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

// tellsNothing says how the answer tells something of the sources a review names: any
// audit annotation (a digest), or a warning or message naming a source or key.
func tellsNothing(a reviews.Answer) error {
	r := a.Response()
	if r == nil {
		return nil
	}
	if len(r.AuditAnnotations) > 0 {
		return fmt.Errorf("the answer carries audit annotations: %v", r.AuditAnnotations)
	}
	said := slices.Clone(r.Warnings)
	if r.Result != nil {
		said = append(said, r.Result.Message)
	}
	for _, w := range said {
		for _, name := range []string{"secret/", "configmap/", flags, "apikey"} {
			if strings.Contains(w, name) {
				return fmt.Errorf("the answer tells of the sources: %q", w)
			}
		}
	}
	return nil
}

// busy are the refusals of a webhook with too much in flight.
var busy = []int{http.StatusTooManyRequests, http.StatusServiceUnavailable}

// admittedUntouched says why the answer is neither a review that allows without a patch
// nor one of the refusals (an HTTP code without a review); nil when it is.
func admittedUntouched(a reviews.Answer, refusals ...int) error {
	if a.Err == nil && a.Review == nil && slices.Contains(refusals, a.Code) {
		return nil
	}
	return a.AllowedUntouched()
}
