// Package integration tests configstamp against a real kube-apiserver and etcd: the
// configstamp binary runs as a separate process, exactly as a user starts it locally
// (--dev-webhook-url), and registers its own webhook.
package integration

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/cluster"
)

var (
	env            *cluster.Cluster
	k8s            client.Client
	configstampBin string
	scheme         = runtime.NewScheme()
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if testing.Short() {
		fmt.Println("skipping integration tests in -short mode")
		return 0
	}
	_ = clientgoscheme.AddToScheme(scheme)
	tmp, err := os.MkdirTemp("", "configstamp-it-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	configstampBin = filepath.Join(tmp, "configstamp")
	build := exec.Command("go", "build", "-o", configstampBin, "./cmd/configstamp")
	build.Dir = cluster.RepoRoot()
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build configstamp:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env, err = cluster.Start(ctx, cluster.Options{Log: func(f string, a ...any) { fmt.Printf("cluster: "+f+"\n", a...) }})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start control plane:", err)
		return 1
	}
	defer env.Stop()
	if k8s, err = client.New(env.Config, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if code != 0 {
		fmt.Println("control plane logs:", filepath.Join(env.Dir, "logs"), "(set CONFIGSTAMP_KEEP_CLUSTER=1 to keep them)")
	}
	return code
}
