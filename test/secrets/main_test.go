// Package secrets proves configstamp's handling of Secrets on a control plane whose
// Deployments really roll (kube-controller-manager, kwok), with rollouts counted as
// ReplicaSets: with Secrets off, Secret edits roll nothing and the API server's audit log
// shows configstamp never touched a Secret; with --secrets, a cert-manager-style TLS
// renewal rolls each consumer once, keys a pod cannot see roll nothing, stamps carry only
// keyed digests, two keys stamp differently and a restart keeps the key; and configstamp
// never logs a Secret's value. A key rotation rolls each Deployment once while two
// replicas read the new key at different moments (rotation_test.go). The phases run in order in one cluster, configstamp
// restarted between them with different flags.
package secrets

import (
	"context"
	"os"
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	// The admin client's API warnings (the webhook's, on the readiness probe) would
	// otherwise print controller-runtime's "SetLogger was never called" stack.
	ctrllog.SetLogger(logr.Discard())
	os.Exit(framework.Main(m, cluster.Options{Controllers: true}, func(_ context.Context, e *framework.Env) (func(bool), error) {
		env = e
		return func(bool) {}, nil
	}))
}
