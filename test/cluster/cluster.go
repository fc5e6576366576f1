// Package cluster runs a real, local Kubernetes control plane for configstamp's tests,
// demo and scale benchmarks: etcd and kube-apiserver (with an audit log), and on request
// kube-controller-manager, kube-scheduler and kwok with fake nodes, so that Deployments
// really roll. Everything listens on loopback; Stop ends every process.
package cluster

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
)

// Tokens of the static users; both are cluster admins, with distinct names so logs and
// the audit log tell who did what.
const (
	AdminUser       = "admin"
	ConfigstampUser = "configstamp"
)

// Options select what runs.
type Options struct {
	// BinDir holds etcd and kube-apiserver (and, with Controllers, kube-controller-manager,
	// kube-scheduler, kwok and kwok-stages.yaml). Default: BinDir().
	BinDir string
	// Dir holds state and logs; default a new temporary directory, removed by Stop.
	Dir string
	// Controllers adds kube-controller-manager, kube-scheduler and kwok with Nodes fake
	// nodes (default 3), so Deployments get ReplicaSets and Running pods.
	Controllers bool
	Nodes       int
	// NotReadyHashes: kwok never makes a pod Ready (nor Running) whose
	// configstamp.io/config-hash annotation is one of these, so a "bad config" is real
	// to the Deployment controller (its rollout stalls, its progress deadline passes).
	NotReadyHashes []string
	// WebhookClientCert has the API server present a client certificate to every
	// admission webhook (its admission configuration); Cluster.WebhookClientCA is the CA
	// that signed it.
	WebhookClientCert bool
	// APIServerArgs are extra kube-apiserver flags.
	APIServerArgs []string
	// Log receives progress lines; nil discards them.
	Log func(format string, args ...any)
}

// Cluster is a running control plane.
type Cluster struct {
	Dir string
	// Kubeconfig is an admin kubeconfig; ConfigstampKubeconfig one for configstamp's user.
	Kubeconfig            string
	ConfigstampKubeconfig string
	// AuditLog is the API server's audit log (level Metadata for apps resources).
	AuditLog string
	// Config is a rest.Config for the admin user.
	Config *rest.Config
	// URL is the API server's address.
	URL string
	// BinDir holds the binaries the cluster runs (and helm, helmfile when built).
	BinDir string
	// WebhookClientCA is the CA of the client certificate the API server presents to
	// admission webhooks (Options.WebhookClientCert; "" without).
	WebhookClientCA string

	opts    Options
	ownDir  bool
	procs   []*proc
	stopped bool
}

type proc struct {
	name string
	args []string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start brings the control plane up and waits until the API server is ready (and, with
// controllers, until the fake nodes are Ready).
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.Log == nil {
		opts.Log = func(string, ...any) {}
	}
	if opts.BinDir == "" {
		if opts.BinDir, err = BinDir(opts.Controllers); err != nil {
			return nil, err
		}
	}
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	c := &Cluster{opts: opts, Dir: opts.Dir, BinDir: opts.BinDir}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "configstamp-cluster-"); err != nil {
			return nil, err
		}
		c.ownDir = true
	}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	for _, d := range []string{"etcd", "pki", "logs"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdPort, peerPort, apiPort := ports[0], ports[1], ports[2]
	c.URL = fmt.Sprintf("https://127.0.0.1:%d", apiPort)

	pki, err := c.writePKI()
	if err != nil {
		return nil, err
	}
	c.AuditLog = filepath.Join(c.Dir, "logs", "audit.log")

	apiArgs := opts.APIServerArgs
	if opts.WebhookClientCert {
		var flags []string
		if flags, c.WebhookClientCA, err = c.webhookClientAuth(); err != nil {
			return nil, err
		}
		apiArgs = append(flags, apiArgs...)
	}

	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	if err := c.run("etcd", "--data-dir", filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "default="+peerURL, "--unsafe-no-fsync",
		"--quota-backend-bytes", strconv.Itoa(8<<30)); err != nil {
		return nil, err
	}
	apiArgs = append([]string{"--etcd-servers", etcdURL,
		"--secure-port", strconv.Itoa(apiPort), "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--tls-cert-file", pki.cert, "--tls-private-key-file", pki.key, "--client-ca-file", pki.ca,
		"--token-auth-file", pki.tokens, "--authorization-mode", "Node,RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc", "--service-account-key-file", pki.saKey,
		"--service-account-signing-key-file", pki.saKey, "--service-cluster-ip-range", "10.96.0.0/16",
		"--audit-policy-file", pki.auditPolicy, "--audit-log-path", c.AuditLog,
		"--audit-log-mode", "blocking", "--audit-log-maxsize", "0", // 0: never rotated (readers hold byte offsets)
		"--endpoint-reconciler-type", "none", "--allow-privileged"}, apiArgs...)
	if err := c.run("kube-apiserver", apiArgs...); err != nil {
		return nil, err
	}
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	c.ConfigstampKubeconfig = filepath.Join(c.Dir, "configstamp.kubeconfig")
	if err := writeKubeconfig(c.Kubeconfig, c.URL, pki.ca, AdminUser+"-token"); err != nil {
		return nil, err
	}
	if err := writeKubeconfig(c.ConfigstampKubeconfig, c.URL, pki.ca, ConfigstampUser+"-token"); err != nil {
		return nil, err
	}
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return nil, err
	}
	c.Config.QPS, c.Config.Burst = 200, 400
	opts.Log("waiting for kube-apiserver at %s", c.URL)
	if err := c.waitReady(ctx, 2*time.Minute); err != nil {
		return nil, err
	}
	if opts.Controllers {
		if err := c.startControllers(ctx, pki); err != nil {
			return nil, err
		}
	}
	return c, nil
}

type pkiFiles struct{ ca, cert, key, saKey, tokens, auditPolicy string }

// pkiPaths names the files under DIR/pki.
func pkiPaths(dir string) pkiFiles {
	dir = filepath.Join(dir, "pki")
	return pkiFiles{
		ca: filepath.Join(dir, "ca.crt"), cert: filepath.Join(dir, "apiserver.crt"), key: filepath.Join(dir, "apiserver.key"),
		saKey: filepath.Join(dir, "sa.key"), tokens: filepath.Join(dir, "tokens.csv"), auditPolicy: filepath.Join(dir, "audit-policy.yaml"),
	}
}

func (c *Cluster) writePKI() (pkiFiles, error) {
	p := pkiPaths(c.Dir)
	chain, key, err := certutil.GenerateSelfSignedCertKeyWithOptions(certutil.SelfSignedCertKeyOptions{
		Host: "127.0.0.1", AlternateDNS: []string{"localhost"}, MaxAge: 7 * 24 * time.Hour,
	})
	if err != nil {
		return p, err
	}
	first, rest := pem.Decode(chain)
	if first == nil {
		return p, errors.New("no certificate generated")
	}
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return p, err
	}
	files := map[string][]byte{
		p.cert:   pem.EncodeToMemory(first),
		p.ca:     rest,
		p.key:    key,
		p.saKey:  pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(sa)}),
		p.tokens: []byte(AdminUser + "-token," + AdminUser + ",1,system:masters\n" + ConfigstampUser + "-token," + ConfigstampUser + ",2,system:masters\n"),
		p.auditPolicy: []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
# configstamp's PATCHes of Deployments with their bodies (a few hundred bytes): the
# nudge marker's value tells a nudge ("key=...") from a record write ("record"), test/soak.
- level: Request
  users: ["` + ConfigstampUser + `"]
  verbs: ["patch"]
  resources:
  - group: apps
    resources: ["deployments"]
# Every request configstamp makes, to count them.
- level: Metadata
  users: ["` + ConfigstampUser + `"]
# Every request of a ServiceAccount: configstamp under the chart's RBAC (test/deploy),
# whose namespaced install must read nothing outside its namespaces.
- level: Metadata
  userGroups: ["system:serviceaccounts"]
- level: Metadata
  resources:
  - group: apps
    resources: ["deployments"]
- level: Metadata
  resources:
  - group: ""
    resources: ["configmaps"]
- level: None
`),
	}
	for name, b := range files {
		if err := os.WriteFile(name, b, 0o600); err != nil {
			return p, err
		}
	}
	return p, nil
}

func writeKubeconfig(path, server, caFile, token string) error {
	return os.WriteFile(path, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: %q, certificate-authority: %q}
users:
- name: user
  user: {token: %q}
contexts:
- name: local
  context: {cluster: local, user: user}
current-context: local
`, server, caFile, token)), 0o600)
}

// run starts a binary from BinDir with its output in logs/NAME.log.
func (c *Cluster) run(name string, args ...string) error {
	p, err := c.start(name, args)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	return nil
}

// start starts a binary from BinDir with its output appended to logs/NAME.log (a
// restart keeps the earlier run's lines).
func (c *Cluster) start(name string, args []string) (*proc, error) {
	logf, err := os.OpenFile(filepath.Join(c.Dir, "logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(c.opts.BinDir, name), args...)
	cmd.Dir = c.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// The control plane dies with the test process, even if that is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, args: args, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	c.opts.Log("started %s (pid %d)", name, cmd.Process.Pid)
	return p, nil
}

func (c *Cluster) waitReady(ctx context.Context, timeout time.Duration) error {
	tr, err := rest.TransportFor(c.Config)
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		for _, p := range c.procs {
			select {
			case <-p.done:
				return fmt.Errorf("%s exited early; see %s", p.name, filepath.Join(c.Dir, "logs", p.name+".log"))
			default:
			}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.URL+"/readyz", nil)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver not ready after %s; see %s", timeout, filepath.Join(c.Dir, "logs"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Stop ends every process (SIGTERM, then SIGKILL after 15s) and waits for it, so ports
// are free again, then removes the state directory if Start created it.
func (c *Cluster) Stop() {
	if c == nil || c.stopped {
		return
	}
	c.stopped = true
	for i := len(c.procs) - 1; i >= 0; i-- {
		Terminate(c.procs[i].cmd.Process, c.procs[i].done, 15*time.Second)
	}
	if c.ownDir && os.Getenv("CONFIGSTAMP_KEEP_CLUSTER") == "" {
		os.RemoveAll(c.Dir)
	}
}

// Terminate sends SIGTERM to a process, kills it if it has not exited (done closed)
// within grace, and waits for it.
func Terminate(p *os.Process, done <-chan struct{}, grace time.Duration) {
	select {
	case <-done:
		return
	default:
	}
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = p.Kill()
		<-done
	}
}

// TLSConfig returns a TLS config trusting the API server's CA (for direct HTTP checks).
func (c *Cluster) TLSConfig() (*tls.Config, error) {
	return rest.TLSConfigFor(c.Config)
}

// freePorts returns n ports on loopback that were free a moment ago. They are drawn at
// random below the kernel's ephemeral range (ip_local_port_range), where the
// connections of the other test layers running at the same time take no port, so the
// moment between this check and the server binding the port is not a race with them;
// the kernel's own choice (port 0) when that range cannot be read or has no free port.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	low := ephemeralLow()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		addr := "127.0.0.1:0"
		if low > minPort && tries < 100*n {
			addr = "127.0.0.1:" + strconv.Itoa(minPort+mrand.IntN(low-minPort))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr != "127.0.0.1:0" {
				continue // taken: draw again
			}
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// minPort is the lowest port freePorts draws.
const minPort = 20000

// ephemeralLow is the lowest port of the kernel's ephemeral range, 0 when unknown.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	var low, high int
	if _, err := fmt.Sscan(string(b), &low, &high); err != nil {
		return 0
	}
	return low
}

// FreePort returns a TCP port on loopback that was free a moment ago.
func FreePort() (int, error) {
	p, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}
