package framework

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/cluster"
)

// Configstamp is one configstamp process, started as a user starts it locally.
type Configstamp struct {
	cmd         *exec.Cmd
	done        chan struct{}
	out         *logBuffer
	WebhookPort int
	// URL is the registered webhook URL (the process itself, or a proxy in front).
	URL string
}

// Options for a configstamp process.
type Options struct {
	// WebhookURL overrides the registered URL (a proxy in front of the webhook).
	WebhookURL string
	// WebhookPort is where the webhook server listens (default: a free port).
	WebhookPort int
	// Kubeconfig is the identity configstamp runs as (default: the configstamp user).
	Kubeconfig string
	// SkipRegistration runs without --dev-webhook-url: the test registers the webhook.
	SkipRegistration bool
	// RemoveRegistration lets dev mode delete its registration on a clean exit. Off,
	// the registration outlives the process (--dev-keep-registration), as an installed
	// chart's does: a stop models an outage of an installed webhook.
	RemoveRegistration bool
	// NoWebhook is for a process that serves no webhook (--role watcher): no
	// registration, and Run waits only until it has started.
	NoWebhook bool
	// Args are extra flags.
	Args []string
}

// Run starts configstamp with the configstamp user's kubeconfig and debug logs, and
// waits until the API server calls its webhook.
func (e *Env) Run(ctx context.Context, o Options) (*Configstamp, error) {
	port := o.WebhookPort
	if port == 0 {
		var err error
		if port, err = cluster.FreePort(); err != nil {
			return nil, err
		}
	}
	p := &Configstamp{done: make(chan struct{}), out: &logBuffer{}, WebhookPort: port, URL: o.WebhookURL}
	if p.URL == "" {
		p.URL = fmt.Sprintf("https://127.0.0.1:%d", port)
	}
	kubeconfig := o.Kubeconfig
	if kubeconfig == "" {
		kubeconfig = e.Cluster.ConfigstampKubeconfig
	}
	args := []string{
		"--kubeconfig", kubeconfig, "--webhook-port", fmt.Sprint(port), "--webhook-host", "127.0.0.1",
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--zap-log-level", "debug",
	}
	if !namesHashKey(o.Args) {
		if err := e.ensureHashKey(ctx); err != nil {
			return nil, err
		}
		args = append(args, "--hash-key", HashKeyRef)
	}
	if !o.SkipRegistration && !o.NoWebhook {
		args = append(args, "--dev-webhook-url", p.URL)
		if !o.RemoveRegistration {
			args = append(args, "--dev-keep-registration")
		}
	}
	args = append(args, o.Args...)
	p.cmd = exec.Command(e.Binary, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	wait := p.waitServing
	if o.NoWebhook {
		wait = p.waitStarted
	}
	if err := wait(ctx, e); err != nil {
		p.Stop()
		return nil, fmt.Errorf("%w\nconfigstamp log:\n%s", err, p.Output())
	}
	return p, nil
}

// The hash key configstamp runs with unless a test's Args name another: a Secret the
// framework creates holding HashKey, so that tests recompute stamps from docs/hash.md
// (test/hashdoc) without reading it.
const (
	HashKeyNamespace = "configstamp-test"
	HashKeyName      = "hash-key"
	HashKeyRef       = HashKeyNamespace + "/" + HashKeyName
)

// HashKey is the installation key in HashKeyRef (32 bytes).
var HashKey = []byte("configstamp-test-framework-key!!")

// namesHashKey reports whether args give configstamp a hash key Secret.
func namesHashKey(args []string) bool {
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && (name == "hash-key" || name == "secret-hash-key") {
			return true
		}
	}
	return false
}

// ensureHashKey creates the namespace and Secret of HashKeyRef unless they exist.
func (e *Env) ensureHashKey(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: HashKeyNamespace}}
	if err := e.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create hash key namespace: %w", err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: HashKeyNamespace, Name: HashKeyName},
		Data: map[string][]byte{"key": HashKey}}
	if err := e.Client.Create(ctx, sec); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create hash key secret: %w", err)
	}
	return nil
}

// Start is Run for a test: it fails the test on error, stops the process at cleanup,
// and prints its log if the test failed.
func (e *Env) Start(t testing.TB, o Options) *Configstamp {
	t.Helper()
	p, err := e.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("configstamp log:\n%s", p.Output())
		}
	})
	return p
}

// ProbeNamespace is where readiness probes run.
const ProbeNamespace = "configstamp-probe"

// waitServing waits until a server-side dry-run create in an opted-in namespace comes
// back stamped: proof that the API server calls this process's webhook.
func (p *Configstamp) waitServing(ctx context.Context, e *Env) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ProbeNamespace, Labels: map[string]string{stamp.InjectLabel: stamp.InjectValue}}}
	_ = e.Client.Create(ctx, ns)
	deadline := time.Now().Add(90 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("configstamp exited")
		default:
		}
		d := ProbeDeployment()
		if last = e.Client.Create(ctx, d, client.DryRunAll); last == nil {
			if d.Spec.Template.Annotations[stamp.HashAnnotation] != "" {
				return nil
			}
			last = fmt.Errorf("dry-run create not stamped yet")
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("webhook not serving within 90s: %v", last)
}

// waitStarted waits until the process logs that it starts its manager (a process that
// serves no webhook).
func (p *Configstamp) waitStarted(_ context.Context, _ *Env) error {
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("configstamp exited")
		default:
		}
		if strings.Contains(p.Output(), `"msg":"Starting configstamp"`) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("configstamp not started within 90s")
}

// ProbeDeployment is a Deployment in ProbeNamespace that consumes one ConfigMap.
func ProbeDeployment() *appsv1.Deployment {
	labels := map[string]string{"app": "probe"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ProbeNamespace, Name: "probe"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "c", Image: "registry.example/probe:1",
					EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "probe"}}}}}},
			}},
		},
	}
}

// Stop sends SIGTERM and waits for the process to exit.
func (p *Configstamp) Stop() { cluster.Terminate(p.cmd.Process, p.done, 20*time.Second) }

// Signal sends SIGTERM and returns at once; Exited tells when the process is gone.
func (p *Configstamp) Signal() { _ = p.cmd.Process.Signal(syscall.SIGTERM) }

// Exited is closed when the process has exited.
func (p *Configstamp) Exited() <-chan struct{} { return p.done }

// ExitCode is the process's exit code once it has exited (-1 before).
func (p *Configstamp) ExitCode() int {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}

// PID is the process id.
func (p *Configstamp) PID() int { return p.cmd.Process.Pid }

// Alive reports whether the process still runs.
func (p *Configstamp) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Output is everything the process wrote.
func (p *Configstamp) Output() string { return p.out.String() }

// Logs returns the process's JSON log records.
func (p *Configstamp) Logs() []map[string]any {
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

// StampLines returns the "Stamped config hash" records for one Deployment, dry runs
// excluded.
func (p *Configstamp) StampLines(namespace, name string) []map[string]any {
	var out []map[string]any
	for _, rec := range p.Logs() {
		if rec["msg"] == "Stamped config hash" && rec["namespace"] == namespace && rec["name"] == name && rec["dryRun"] != true {
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

// Kill sends SIGKILL (no graceful shutdown, no lease release) and waits for the exit.
func (p *Configstamp) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}
