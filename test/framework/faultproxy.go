package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/configstamp/configstamp/test/cluster"
)

// FaultProxy is an HTTPS reverse proxy in front of the API server for one client
// (configstamp, through Kubeconfig). While faults are on, it answers every request
// itself with the chosen status codes in turn (429 Too Many Requests with Retry-After:
// 1, 500, 503), as an overloaded or failing API server does, and counts what it was
// asked.
type FaultProxy struct {
	URL string
	// Kubeconfig is the configstamp user's kubeconfig with the proxy as its server.
	Kubeconfig string

	srv *http.Server

	mu       sync.Mutex
	faulting bool
	codes    []int
	next     int
	// faulted counts the requests answered with a fault, by verb and path shape.
	faulted map[string]int
	// inflight cancels the requests being forwarded (watches last): a fault cuts them.
	inflight map[*http.Request]context.CancelFunc
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
	p := &FaultProxy{URL: "https://" + ln.Addr().String(), faulted: map[string]int{}, inflight: map[*http.Request]context.CancelFunc{}}
	forward := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true},
		FlushInterval: -1, // watches stream
		// A cut request (a fault began) is the client's to retry.
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if code, ok := p.fault(r); ok {
			if code == http.StatusTooManyRequests {
				w.Header().Set("Retry-After", "1")
			}
			http.Error(w, fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":%d}`, code), code)
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		r = r.WithContext(ctx)
		p.mu.Lock()
		p.inflight[r] = cancel
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			delete(p.inflight, r)
			p.mu.Unlock()
			cancel()
		}()
		forward.ServeHTTP(w, r)
	})}
	go func() {
		if err := p.srv.ServeTLS(ln, certFile, keyFile); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "fault proxy:", err)
		}
	}()
	t.Cleanup(func() { _ = p.srv.Close() })

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

// fault decides whether to answer r with a fault, and counts it.
func (p *FaultProxy) fault(r *http.Request) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.faulting {
		return 0, false
	}
	code := p.codes[p.next%len(p.codes)]
	p.next++
	p.faulted[r.Method+" "+pathShape(r)]++
	return code, true
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
// changes the codes and keeps counting.
func (p *FaultProxy) StartFaults(codes ...int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.faulting {
		for _, cancel := range p.inflight {
			cancel()
		}
	}
	p.faulting, p.codes, p.next = true, codes, 0
}

// StopFaults forwards requests again. It returns how many requests were answered with a
// fault since StartFaults, and a summary by verb and path, most frequent first.
func (p *FaultProxy) StopFaults() (int, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faulting = false
	total := 0
	var lines []string
	for k, n := range p.faulted {
		total += n
		lines = append(lines, fmt.Sprintf("%5d %s", n, k))
	}
	sort.Sort(sort.Reverse(sort.StringSlice(lines)))
	p.faulted = map[string]int{}
	return total, strings.Join(lines, "\n")
}
