// Package precision proves that configstamp rolls a Deployment exactly once per change
// its pods can see, and never otherwise, on a control plane whose Deployments really
// roll (kube-controller-manager, kwok), with rollouts counted as ReplicaSets. Every
// scenario runs two ways: on Deployments created before configstamp first started (the
// day it is installed) and on Deployments created while it runs.
package precision

import (
	"context"
	"os"
	"testing"

	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, cluster.Options{Controllers: true}, func(_ context.Context, e *framework.Env) (func(bool), error) {
		env = e
		return func(bool) {}, nil
	}))
}
