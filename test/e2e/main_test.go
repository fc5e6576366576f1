// Package e2e proves configstamp with the tools its users deploy with: real helm,
// helmfile and kubectl against a control plane whose Deployments really roll
// (kube-controller-manager, kube-scheduler, kwok nodes). configstamp runs as a separate
// process, started the way a user starts it locally.
package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

var (
	env *framework.Env
	cs  *framework.Configstamp
)

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, cluster.Options{Controllers: true}, func(ctx context.Context, e *framework.Env) (func(bool), error) {
		env = e
		var err error
		if cs, err = e.Run(ctx, framework.Options{}); err != nil {
			return nil, err
		}
		return func(failed bool) {
			cs.Stop()
			if failed {
				fmt.Printf("configstamp log:\n%s\n", cs.Output())
			}
		}, nil
	}))
}
