package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/configstamp/configstamp/test/cluster"
)

// FaultProxy is an HTTPS reverse proxy in front of the API server for one client
// (configstamp, through Kubeconfig). While faults are on, it answers every request
// itself with the chosen status codes in turn (429 Too Many Requests with Retry-After:
// 1, 500, 503), as an overloaded or failing API server does, and counts what it was
// asked, phase by phase. It can also lose responses: forward a request, then answer
// 503 in place of the API server's answer.
type FaultProxy struct {
	URL string
	// Kubeconfig is the configstamp user's kubeconfig with the proxy as its server.
	Kubeconfig string

	srv       *http.Server
	transport *http.Transport

	mu       sync.Mutex
	faulting bool
	// only, when set, limits the faults to the requests it selects (StartFaultsFor).
	only  func(*http.Request) bool
	codes []int
	next  int
	// phase counts the requests answered with a fault since the last StartFaults;
	// phases holds the earlier phases of this run of faults.
	phase  *FaultPhase
	phases []FaultPhase
	// inflight cancels the requests being forwarded (watches last): a fault cuts them.
	inflight map[*http.Request]context.CancelFunc
	// lose selects the requests whose response is lost; lost records them.
	lose func(*http.Request) bool
	lost []LostResponse
	// slow selects the requests forwarded only after delay (Slow).
	slow  func(*http.Request) bool
	delay time.Duration
}

// FaultPhase is what the proxy answered with faults while one set of codes was on.
type FaultPhase struct {
	Codes      []int
	Start, End time.Time
	// Total counts every request answered with a fault; Check those of the watcher's
	// checks: reads and writes of one named ConfigMap or Deployment (GET or PATCH
	// .../configmaps/NAME, .../deployments/NAME), not lists or watches.
	Total, Check int
	// ByShape counts them by verb and path, names left out.
	ByShape map[string]int
}

// Duration is how long the phase lasted.
func (f FaultPhase) Duration() time.Duration { return f.End.Sub(f.Start) }

// Summary lists the phase's counts by verb and path, most frequent first.
func (f FaultPhase) Summary() string {
	var lines []string
	for k, n := range f.ByShape {
		lines = append(lines, fmt.Sprintf("%5d %s", n, k))
	}
	sort.Sort(sort.Reverse(sort.StringSlice(lines)))
	return strings.Join(lines, "\n")
}

// LostResponse is a request the proxy forwarded and then answered with 503: Code is
// what the API server had answered.
type LostResponse struct {
	Method, Path string
	Code         int
}

// NewFaultProxy starts a proxy in front of the cluster's API server, serving with the
// API server's own certificate (valid for 127.0.0.1), and writes a kubeconfig for the
// configstamp user that points at it. It stops at cleanup.
func NewFaultProxy(t testing.TB, c *cluster.Cluster) *FaultProxy {
	t.Helper()
	caFile, certFile, keyFile := c.PKI()
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	target, err := url.Parse(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &FaultProxy{URL: "https://" + ln.Addr().String(), inflight: map[*http.Request]context.CancelFunc{}}
	p.transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	forward := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport:     p.transport,
		FlushInterval: -1, // watches stream
		// A cut request (a fault began) is the client's to retry.
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, code, lose, done := p.admit(r)
		if code != 0 {
			if code == http.StatusTooManyRequests {
				w.Header().Set("Retry-After", "1")
			}
			http.Error(w, fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":%d}`, code), code)
			return
		}
		defer done()
		if d := p.delayFor(r); d > 0 {
			select { // a slow API server: the request waits, unless its client gives up
			case <-time.After(d):
			case <-r.Context().Done():
				http.Error(w, "client gave up", http.StatusBadGateway)
				return
			}
		}
		if lose {
			rec := httptest.NewRecorder()
			forward.ServeHTTP(rec, r)
			p.mu.Lock()
			p.lost = append(p.lost, LostResponse{Method: r.Method, Path: r.URL.Path, Code: rec.Code})
			p.mu.Unlock()
			http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":503}`, http.StatusServiceUnavailable)
			return
		}
		forward.ServeHTTP(w, r)
	})}
	go func() {
		if err := p.srv.ServeTLS(ln, certFile, keyFile); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "fault proxy:", err)
		}
	}()
	t.Cleanup(func() {
		_ = p.srv.Close()
		p.transport.CloseIdleConnections()
	})

	cfg, err := clientcmd.LoadFromFile(c.ConfigstampKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range cfg.Clusters {
		cl.Server = p.URL
	}
	p.Kubeconfig = filepath.Join(t.TempDir(), "configstamp-via-proxy.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	return p
}

// admit decides, under one lock with StartFaults, whether to answer r with a fault
// (code, counted) or to forward it: then r is returned with a context a fault cancels,
// registered as in flight, and done unregisters it. lose tells that its response is to
// be lost.
func (p *FaultProxy) admit(r *http.Request) (_ *http.Request, code int, lose bool, done func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.faulting && (p.only == nil || p.only(r)) {
		code = p.codes[p.next%len(p.codes)]
		p.next++
		p.phase.Total++
		if checkPath(r) {
			p.phase.Check++
		}
		p.phase.ByShape[r.Method+" "+pathShape(r)]++
		return r, code, false, nil
	}
	ctx, cancel := context.WithCancel(r.Context())
	r = r.WithContext(ctx)
	p.inflight[r] = cancel
	return r, 0, p.lose != nil && p.lose(r), func() {
		p.mu.Lock()
		delete(p.inflight, r)
		p.mu.Unlock()
		cancel()
	}
}

// named splits a namespaced resource path (.../namespaces/NS/RESOURCE/NAME) into its
// resource and name; ok is false for anything else (a list, a subresource, ...).
func named(r *http.Request) (resource, name string, ok bool) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	for i, s := range parts {
		if s == "namespaces" && len(parts) == i+4 {
			return parts[i+2], parts[i+3], true
		}
	}
	return "", "", false
}

// checkPath tells the requests of the watcher's checks: GET or PATCH of one named
// ConfigMap or Deployment, not a watch.
func checkPath(r *http.Request) bool {
	res, _, ok := named(r)
	return ok && (res == "configmaps" || res == "deployments") &&
		(r.Method == http.MethodGet || r.Method == http.MethodPatch) && r.URL.Query().Get("watch") != "true"
}

// DeploymentLists selects the lists and watches of Deployments across namespaces (the
// watcher's informer), for StartFaultsFor.
func DeploymentLists(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/apis/apps/v1/deployments")
}

// DeploymentPatch selects configstamp's PATCHes of one Deployment (nudges, record
// writes): for LoseResponses.
func DeploymentPatch(r *http.Request) bool {
	res, _, ok := named(r)
	return ok && res == "deployments" && r.Method == http.MethodPatch
}

// pathShape is the request's resource path with names left out, and watch marked.
func pathShape(r *http.Request) string {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	for i := range parts {
		// .../namespaces/NS/RESOURCE/NAME
		if i > 0 && parts[i-1] == "namespaces" || i > 2 && parts[i-3] == "namespaces" {
			parts[i] = "*"
		}
	}
	s := "/" + strings.Join(parts, "/")
	if r.URL.Query().Get("watch") == "true" {
		s += "?watch"
	}
	return s
}

// StartFaults answers every request from now on with codes in turn; when faults were
// off, it first cuts every request being forwarded (open watches too). Called again, it
// ends the current phase and begins another with the new codes.
func (p *FaultProxy) StartFaults(codes ...int) { p.StartFaultsFor(nil, codes...) }

// StartFaultsFor is StartFaults for the requests match selects only (nil: all); the
// others are forwarded as usual.
func (p *FaultProxy) StartFaultsFor(match func(*http.Request) bool, codes ...int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	p.only = match
	if !p.faulting {
		for r, cancel := range p.inflight {
			if match == nil || match(r) {
				cancel()
			}
		}
	} else {
		p.phase.End = now
		p.phases = append(p.phases, *p.phase)
	}
	p.faulting, p.codes, p.next = true, codes, 0
	p.phase = &FaultPhase{Codes: codes, Start: now, ByShape: map[string]int{}}
}

// StopFaults forwards requests again. It returns the phases since faults were off, in
// order.
func (p *FaultProxy) StopFaults() []FaultPhase {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.faulting {
		return nil
	}
	p.faulting = false
	p.phase.End = time.Now()
	out := append(p.phases, *p.phase)
	p.phases, p.phase = nil, nil
	return out
}

// LoseResponses forwards every request that match selects and then answers it with
// 503 in place of the API server's response (the write happened; its client cannot
// know), until StopLosing.
func (p *FaultProxy) LoseResponses(match func(*http.Request) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lose = match
}

// Slow forwards every request that match selects only after d, as a slow API server
// answers (nil match: none), until called again.
func (p *FaultProxy) Slow(match func(*http.Request) bool, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.slow, p.delay = match, d
}

func (p *FaultProxy) delayFor(r *http.Request) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.slow != nil && p.slow(r) {
		return p.delay
	}
	return 0
}

// ConfigMapGetsIn selects the reads of one named ConfigMap in namespace ns (not lists or
// watches), for Slow.
func ConfigMapGetsIn(ns string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		res, _, ok := named(r)
		return ok && res == "configmaps" && r.Method == http.MethodGet && r.URL.Query().Get("watch") != "true" &&
			strings.Contains(r.URL.Path, "/namespaces/"+ns+"/")
	}
}

// StopLosing passes responses through again and returns the requests whose response
// was lost (those still in flight are recorded when they end).
func (p *FaultProxy) StopLosing() []LostResponse {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lose = nil
	out := p.lost
	p.lost = nil
	return out
}
