package framework

import (
	"fmt"
	"io"
	"net"
	"sync"
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
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	_, _ = io.Copy(c, up)
	c.Close()
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
