// Package faults breaks the control plane under configstamp while it works, on a real
// control plane whose Deployments really roll (kube-controller-manager, kwok): the API
// server restarted, etcd paused, the leader killed or paused past its Lease (also while
// it adopts 2,000 Deployments installed over), the webhook slower than its timeout,
// configstamp's own requests answered with 429 and 5xx or their answers lost, and
// another controller writing the same Deployments.
// Every scenario ends with the same check: every change was stamped exactly once,
// nothing rolled twice, nothing was lost, and that still holds once configstamp has
// nothing left to do.
// Scenarios run one after another on one shared control plane (a fault hits the whole
// cluster), each with its own configstamp, registration and namespaces.
package faults

import (
	"context"
	"os"
	"testing"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	log.SetLogger(logr.Discard()) // the test's own clients: their warnings are noise here
	os.Exit(framework.Main(m, cluster.Options{Controllers: true}, func(_ context.Context, e *framework.Env) (func(bool), error) {
		env = e
		return func(bool) {}, nil
	}))
}
