package webhook

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

const slowReview = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u"}}`

// Connections that send their headers and then their body a byte at a time hold their
// slots for bodyDeadline at most, then are answered: a slot of every one of them cannot
// make every real review 429 (admitted unstamped) for longer.
func TestGuardSlowBodiesFreeTheirSlots(t *testing.T) {
	wh := &admission.Webhook{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		return admission.Allowed("")
	})}
	g := &guard{wh: wh, maxBytes: DefaultMaxRequestBytes, slots: make(chan struct{}, DefaultMaxInFlight)}
	srv := httptest.NewServer(g)
	defer srv.Close()
	start := time.Now()
	conns := make([]net.Conn, DefaultMaxInFlight)
	for i := range conns {
		c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		if _, err := fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	for len(g.slots) < cap(g.slots) {
		time.Sleep(10 * time.Millisecond)
	}
	var codes []int
	for time.Since(start) < bodyDeadline+2*slotWait+time.Second {
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(slowReview))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == http.StatusOK {
			break
		}
	}
	took := time.Since(start)
	t.Logf("real reviews while %d bodies trickle: %v, answered after %v", len(conns), codes, took.Round(10*time.Millisecond))
	if codes[len(codes)-1] != http.StatusOK || took > bodyDeadline+slotWait+500*time.Millisecond {
		t.Fatalf("want a real review answered 200 within %v of the slow bodies; got %v after %v", bodyDeadline+slotWait, codes, took)
	}
	_ = conns[0].SetReadDeadline(time.Now().Add(time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conns[0]), nil)
	if err != nil {
		t.Fatalf("a slow body was not answered: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !strings.Contains(string(body), `"code":400`) {
		t.Fatalf("a slow body answered %d %s, want a review of code 400 (unreadable)", resp.StatusCode, body)
	}
}

// The read deadline is lifted once the body is read: a handler whose reads take longer
// than bodyDeadline keeps its context; the write deadline once answered: the connection
// serves its next request after it.
func TestGuardDeadlinesSpareTheHandler(t *testing.T) {
	var n atomic.Int32
	wh := &admission.Webhook{Handler: admission.HandlerFunc(func(ctx context.Context, _ admission.Request) admission.Response {
		if n.Add(1) > 1 {
			return admission.Allowed("")
		}
		select {
		case <-ctx.Done():
			return admission.Denied("context cancelled")
		case <-time.After(bodyDeadline + 500*time.Millisecond):
			return admission.Allowed("")
		}
	})}
	srv := httptest.NewUnstartedServer(&guard{wh: wh, maxBytes: DefaultMaxRequestBytes, slots: make(chan struct{}, 1)})
	var conns atomic.Int32
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	client := srv.Client()
	start := time.Now()
	for i := 0; i < 2; i++ {
		if i == 1 {
			time.Sleep(time.Until(start.Add(writeDeadline + 200*time.Millisecond)))
		}
		resp, err := client.Post(srv.URL, "application/json", strings.NewReader(slowReview))
		if err != nil {
			t.Fatalf("request %d on the kept-alive connection: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"allowed":true`) {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if conns.Load() != 1 {
		t.Fatalf("the requests took %d connections, want 1 kept alive", conns.Load())
	}
}

// The write deadline follows the configured read timeout: a handler slower than the
// default budget (a longer --read-timeout, from a longer timeoutSeconds) still answers;
// one slower than the deadline it was given does not.
func TestGuardWriteDeadlineFollowsTheReadTimeout(t *testing.T) {
	slow := &admission.Webhook{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		time.Sleep(700 * time.Millisecond)
		return admission.Allowed("")
	})}
	for _, tc := range []struct {
		write    time.Duration
		answered bool
	}{{300 * time.Millisecond, false}, {3 * time.Second, true}} {
		srv := httptest.NewServer(&guard{wh: slow, maxBytes: DefaultMaxRequestBytes, slots: make(chan struct{}, 1), write: tc.write})
		resp, err := srv.Client().Post(srv.URL, "application/json", strings.NewReader(slowReview))
		answered := err == nil
		if err == nil {
			body, rerr := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			answered = rerr == nil && strings.Contains(string(body), `"allowed":true`)
		}
		srv.Close()
		if answered != tc.answered {
			t.Errorf("write deadline %v, handler 700ms: answered %v, want %v (err %v)", tc.write, answered, tc.answered, err)
		}
	}
}
