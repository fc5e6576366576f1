// Package security proves what a pod that can reach configstamp's webhook port can and
// cannot make it do, by posting AdmissionReviews straight to the port over TLS (never
// through the API server), against a real kube-apiserver and etcd: reviews for an
// excluded namespace, for one not opted in, naming another namespace than the request's,
// with 1,000 sources, of 5 MiB, and 50 of them at once are answered allowed and
// untouched, with no read by configstamp where it must not read (the API server's audit
// log) and no log line naming a namespace outside its scope; under a flood of the
// largest reviews its memory stays under the chart's limit and real Deployment creates
// are still stamped; and a digest it gives teaches nothing about a ConfigMap's content
// (no digest to compare with the same content elsewhere, none to find offline).
package security

import (
	"context"
	"os"
	"testing"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

var (
	env *framework.Env
	k8s client.Client
)

func TestMain(m *testing.M) {
	// The admin client's API warnings would otherwise print controller-runtime's
	// "SetLogger was never called" stack.
	ctrllog.SetLogger(logr.Discard())
	os.Exit(framework.Main(m, cluster.Options{}, func(_ context.Context, e *framework.Env) (func(bool), error) {
		env, k8s = e, e.Client
		return func(bool) {}, nil
	}))
}
