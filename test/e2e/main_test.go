// Package e2e proves configstamp with the tools its users deploy with: real helm,
// helmfile and kubectl against a control plane whose Deployments really roll
// (kube-controller-manager, kube-scheduler, kwok nodes). configstamp runs as a separate
// process, started the way a user starts it locally.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

var (
	env *framework.Env
	cs  *framework.Configstamp
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if testing.Short() {
		fmt.Println("skipping end-to-end tests in -short mode")
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var err error
	if env, err = framework.Setup(ctx, cluster.Options{Controllers: true}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Teardown()
	if cs, err = env.Run(ctx, framework.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cs.Stop()
	code := m.Run()
	if code != 0 {
		fmt.Printf("configstamp log:\n%s\n", cs.Output())
	}
	return code
}
