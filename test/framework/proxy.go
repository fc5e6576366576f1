package framework

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/configstamp/configstamp/test/cluster"
)

// Proxy is a TCP forwarder in front of the webhook: stopping it makes the webhook
// unreachable while the registration stays, as in an outage.
type Proxy struct {
	Addr, target string
	mu           sync.Mutex
	ln           net.Listener
	conns        map[net.Conn]struct{}
	// delay holds back every chunk sent to the target (a slow webhook).
	delay atomic.Int64
}

// NewProxy starts a proxy on a free loopback port forwarding to target.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: fmt.Sprintf("127.0.0.1:%d", port), target: target, conns: map[net.Conn]struct{}{}}
	p.Start(t)
	t.Cleanup(p.Stop)
	return p
}

// Start listens again (on the same address).
func (p *Proxy) Start(t testing.TB) {
	t.Helper()
	var ln net.Listener
	Eventually(t, 10*time.Second, "proxy listening", func() (err error) {
		ln, err = net.Listen("tcp", p.Addr)
		return err
	})
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
}

// SetTarget sends new connections to target.
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

func (p *Proxy) forward(c net.Conn) {
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	up, err := net.Dial("tcp", target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	go func() { _, _ = io.Copy(up, &slowReader{r: c, delay: &p.delay}); up.Close() }()
	_, _ = io.Copy(c, up)
	c.Close()
}

// SetDelay holds back everything sent to the target by d from now on, on open
// connections too: a webhook that answers late (0: no delay).
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// slowReader waits delay before returning each read.
type slowReader struct {
	r     io.Reader
	delay *atomic.Int64
}

func (s *slowReader) Read(b []byte) (int, error) {
	n, err := s.r.Read(b)
	if d := time.Duration(s.delay.Load()); n > 0 && d > 0 {
		time.Sleep(d)
	}
	return n, err
}

// Switch sends every request from now on to target: new connections go there, and the
// open ones (the API server keeps its connections to a webhook alive) are closed, so
// the next request opens a new one. Call it while no admission is in flight.
func (p *Proxy) Switch(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
}

// Stop closes the listener and every open connection.
func (p *Proxy) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
}
