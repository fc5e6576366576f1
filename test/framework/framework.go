// Package framework holds what configstamp's integration and end-to-end tests share:
// running the configstamp binary as a separate process against a test control plane,
// a TCP proxy to simulate webhook outages, namespaces, and polling helpers.
package framework

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/cluster"
)

// Env is a running control plane, an admin client for it, and the configstamp binary.
type Env struct {
	Cluster *cluster.Cluster
	Client  client.Client
	Binary  string
	tmp     string
}

// Setup builds configstamp and starts a control plane (with controllers and kwok when
// asked). Call Teardown when done.
func Setup(ctx context.Context, opts cluster.Options) (*Env, error) {
	e := &Env{}
	var err error
	if e.tmp, err = os.MkdirTemp("", "configstamp-test-"); err != nil {
		return nil, err
	}
	e.Binary = filepath.Join(e.tmp, "configstamp")
	build := exec.CommandContext(ctx, "go", "build", "-o", e.Binary, "./cmd/configstamp")
	build.Dir = cluster.RepoRoot()
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		e.Teardown()
		return nil, fmt.Errorf("build configstamp: %w", err)
	}
	if opts.Log == nil {
		opts.Log = func(f string, a ...any) { fmt.Printf("cluster: "+f+"\n", a...) }
	}
	if e.Cluster, err = cluster.Start(ctx, opts); err != nil {
		e.Teardown()
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		e.Teardown()
		return nil, err
	}
	if e.Client, err = client.New(e.Cluster.Config, client.Options{Scheme: scheme}); err != nil {
		e.Teardown()
		return nil, err
	}
	return e, nil
}

// Teardown stops the control plane and removes the build.
func (e *Env) Teardown() {
	if e.Cluster != nil {
		e.Cluster.Stop()
	}
	os.RemoveAll(e.tmp)
}

// Eventually polls f until it returns nil or the deadline passes.
func Eventually(t testing.TB, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Consistently checks f over a whole period: a negative assertion needs one.
func Consistently(t testing.TB, period time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(period)
	for time.Now().Before(deadline) {
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err := f(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// NewNamespace creates a fresh namespace named after the test, opted in or not.
func (e *Env) NewNamespace(t testing.TB, optIn bool) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 50 {
		name = name[len(name)-50:]
	}
	name = fmt.Sprintf("t-%s-%04x", strings.Trim(name, "-"), rand.IntN(0xffff))
	e.CreateNamespace(t, name, optIn)
	return name
}

// CreateNamespace creates a namespace if it does not exist yet.
func (e *Env) CreateNamespace(t testing.TB, name string, optIn bool) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if optIn {
		ns.Labels = map[string]string{stamp.InjectLabel: stamp.InjectValue}
	}
	if err := e.Client.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// Main is the body of a TestMain that needs a control plane: it skips everything in
// -short mode, builds configstamp and starts the control plane, calls start (which may
// start more and returns what to do after the tests, told whether they failed), runs
// the tests and tears everything down. Its result is the exit code.
func Main(m *testing.M, opts cluster.Options, start func(ctx context.Context, env *Env) (after func(failed bool), err error)) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipping tests that need a control plane in -short mode")
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	env, err := Setup(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Teardown()
	removePolicy, err := installSelfPolicyFromEnv(ctx, env)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer removePolicy()
	after := func(bool) {}
	if start != nil {
		if after, err = start(ctx, env); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	code := m.Run()
	after(code != 0)
	if code != 0 {
		fmt.Println("control plane logs:", filepath.Join(env.Cluster.Dir, "logs"), "(set CONFIGSTAMP_KEEP_CLUSTER=1 to keep them)")
	}
	return code
}

// Command prepares a run of kubectl (from PATH) or of a tool built beside the control
// plane (helm, helmfile) against the cluster as admin, with helm's state in a scratch
// directory rather than the user's home.
func (e *Env) Command(dir string, extraEnv []string, name string, args ...string) *exec.Cmd {
	path := name
	if name != "kubectl" {
		path = filepath.Join(e.Cluster.BinDir, name)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	home := filepath.Join(e.tmp, "home")
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+e.Cluster.Kubeconfig,
		"PATH="+e.Cluster.BinDir+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	cmd.Env = append(cmd.Env, extraEnv...)
	return cmd
}
