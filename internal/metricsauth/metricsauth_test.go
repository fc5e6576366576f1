package metricsauth

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeAPI answers TokenReviews for the token "good" (user scraper) and "other" (user
// nobody), and allows get /metrics to scraper only; it counts the reviews.
func fakeAPI(fail *bool, reviews *int) *fake.Clientset {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		*reviews++
		if *fail {
			return true, nil, errors.New("unreachable")
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		switch tr.Spec.Token {
		case "good":
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "scraper", Groups: []string{"g"}}}
		case "scoped": // the same user, with an extra the authorizer denies
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "scraper", Groups: []string{"g"},
				Extra: map[string]authenticationv1.ExtraValue{"scopes": {"none"}}}}
		case "other":
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "nobody"}}
		default:
			tr.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, tr, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		*reviews++
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		na := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = sar.Spec.User == "scraper" && len(sar.Spec.Groups) == 1 && na != nil && na.Path == "/metrics" && na.Verb == "get" &&
			len(sar.Spec.Extra["scopes"]) == 0
		return true, sar, nil
	})
	return cs
}

func TestGuard(t *testing.T) {
	var fail bool
	var reviews int
	now := time.Unix(1000, 0)
	g := &guard{api: fakeAPI(&fail, &reviews), now: func() time.Time { return now }, users: newCache[authenticationv1.UserInfo](), decisions: newCache[bool]()}
	req := func(method, path, auth string) int {
		r := httptest.NewRequest(method, path, nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		code, _ := g.check(r)
		return code
	}
	for _, c := range []struct {
		method, path, auth string
		want               int
	}{
		{"GET", "/metrics", "", http.StatusUnauthorized},
		{"GET", "/metrics", "Basic Zm9vOmJhcg==", http.StatusUnauthorized},
		{"GET", "/metrics", "Bearer ", http.StatusUnauthorized},
		{"GET", "/metrics", "Bearer bogus", http.StatusUnauthorized},
		{"GET", "/metrics", "Bearer other", http.StatusForbidden},
		{"GET", "/metrics", "Bearer good", http.StatusOK},
		{"GET", "/metrics", " bearer  good ", http.StatusOK},
		{"GET", "/metrics", "Bearer scoped", http.StatusForbidden}, // not the cached allow of "good"
		{"POST", "/metrics", "Bearer good", http.StatusForbidden},
		{"GET", "/debug", "Bearer good", http.StatusForbidden},
	} {
		if got := req(c.method, c.path, c.auth); got != c.want {
			t.Errorf("%s %s %q: %d, want %d", c.method, c.path, c.auth, got, c.want)
		}
	}
	// Cached: no review for a repeat within the lifetimes, even with the API server down.
	fail = true
	before := reviews
	if got := req("GET", "/metrics", "Bearer good"); got != http.StatusOK {
		t.Fatalf("repeat: %d", got)
	}
	if reviews != before {
		t.Fatalf("a cached token and decision were reviewed again (%d reviews)", reviews-before)
	}
	// Past the token's lifetime with the API server down: 500, never served.
	now = now.Add(authnTTL + time.Second)
	if code, err := g.check(httptest.NewRequest("GET", "/metrics", nil)); code != http.StatusUnauthorized || err != nil {
		t.Fatalf("no token: %d %v", code, err)
	}
	r := httptest.NewRequest("GET", "/metrics", nil)
	r.Header.Set("Authorization", "Bearer good")
	if code, err := g.check(r); code != http.StatusInternalServerError || err == nil {
		t.Fatalf("API server down after expiry: %d %v, want 500 and an error", code, err)
	}
}

func TestCacheBounded(t *testing.T) {
	c := newCache[bool]()
	now := time.Unix(0, 0)
	for i := range 3 * cacheSize {
		c.put(string(rune(i)), true, now, time.Minute)
	}
	if len(c.m) > cacheSize {
		t.Fatalf("%d entries, bound %d", len(c.m), cacheSize)
	}
	c.put("x", true, now, time.Minute)
	if _, ok := c.get("x", now.Add(time.Minute)); ok {
		t.Fatal("an entry outlived its lifetime")
	}
}
