// Package integration tests configstamp against a real kube-apiserver and etcd: the
// configstamp binary runs as a separate process, exactly as a user starts it locally
// (--dev-webhook-url), and registers its own webhook.
package integration

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

var (
	env *framework.Env
	k8s client.Client
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var err error
	if env, err = framework.Setup(ctx, cluster.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Teardown()
	k8s = env.Client
	code := m.Run()
	if code != 0 {
		fmt.Println("control plane logs:", filepath.Join(env.Cluster.Dir, "logs"), "(set CONFIGSTAMP_KEEP_CLUSTER=1 to keep them)")
	}
	return code
}
