package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/cluster"
)

// configstamp is one running configstamp process.
type configstamp struct {
	t           *testing.T
	cmd         *exec.Cmd
	done        chan struct{}
	out         *logBuffer
	WebhookPort int
	URL         string
}

type procOptions struct {
	// webhookURL overrides the registered URL (a proxy in front of the webhook).
	webhookURL string
	// webhookPort is where the webhook server listens (default: a free port).
	webhookPort int
	args        []string
}

// startConfigstamp runs the configstamp binary against the test control plane and waits
// until the API server calls its webhook.
func startConfigstamp(t *testing.T, o procOptions) *configstamp {
	t.Helper()
	port := o.webhookPort
	if port == 0 {
		var err error
		if port, err = cluster.FreePort(); err != nil {
			t.Fatal(err)
		}
	}
	p := &configstamp{t: t, done: make(chan struct{}), out: &logBuffer{}, WebhookPort: port}
	p.URL = o.webhookURL
	if p.URL == "" {
		p.URL = fmt.Sprintf("https://127.0.0.1:%d", port)
	}
	args := append([]string{
		"--kubeconfig", env.ConfigstampKubeconfig, "--dev-webhook-url", p.URL,
		"--webhook-port", fmt.Sprint(port), "--webhook-host", "127.0.0.1",
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--zap-log-level", "debug",
	}, o.args...)
	p.cmd = exec.Command(configstampBin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("configstamp log:\n%s", p.out.String())
		}
	})
	p.waitServing(t)
	return p
}

// waitServing waits until a server-side dry-run create in an opted-in namespace comes
// back stamped, which proves the API server calls this process's webhook.
func (p *configstamp) waitServing(t *testing.T) {
	t.Helper()
	ns := probeNamespace(t)
	eventually(t, 60*time.Second, "webhook serving", func() error {
		select {
		case <-p.done:
			return fmt.Errorf("configstamp exited:\n%s", p.out.String())
		default:
		}
		dep := deployment("probe", podWithVolumes("probe"))
		dep.Namespace = ns
		if err := k8s.Create(context.Background(), dep, client.DryRunAll); err != nil {
			return err
		}
		if dep.Spec.Template.Annotations[stamp.HashAnnotation] == "" {
			return fmt.Errorf("dry-run create not stamped yet")
		}
		return nil
	})
}

var probeOnce sync.Once

func probeNamespace(t *testing.T) string {
	const name = "configstamp-probe"
	probeOnce.Do(func() { createNamespace(t, name, true) })
	return name
}

// Stop sends SIGTERM and waits for the process to exit.
func (p *configstamp) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Alive reports whether the process still runs.
func (p *configstamp) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Logs returns configstamp's JSON log records.
func (p *configstamp) Logs() []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(p.out.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil {
			out = append(out, rec)
		}
	}
	return out
}

type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if os.Getenv("CONFIGSTAMP_TEST_VERBOSE") != "" {
		os.Stderr.Write(p)
	}
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proxy is a TCP forwarder in front of the webhook: stopping it makes the webhook
// unreachable while the registration stays, as in an outage.
type proxy struct {
	addr, target string
	mu           sync.Mutex
	ln           net.Listener
	conns        map[net.Conn]struct{}
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{addr: fmt.Sprintf("127.0.0.1:%d", port), target: target, conns: map[net.Conn]struct{}{}}
	p.Start(t)
	t.Cleanup(p.Stop)
	return p
}

func (p *proxy) Start(t *testing.T) {
	t.Helper()
	var ln net.Listener
	eventually(t, 10*time.Second, "proxy listening", func() (err error) {
		ln, err = net.Listen("tcp", p.addr)
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

func (p *proxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
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
func (p *proxy) Stop() {
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

// waitForDeployments is a small helper to fetch a Deployment.
func getDeployment(t *testing.T, ns, name string) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
		t.Fatalf("get deployment %s/%s: %v", ns, name, err)
	}
	return &d
}
