// Package badinput feeds configstamp bad and extreme input through a real kube-apiserver
// and etcd (no controllers): malformed AdmissionReviews posted straight to the webhook,
// objects near the API server's and etcd's size limits, ConfigMaps and Secrets at the
// API's limits (1 MiB, 10,000 keys, binaryData, every key character, 253-character
// names), and pod specs the API server lets through (duplicate references, one ConfigMap
// referenced 100 times, 500 ConfigMaps). Each must be admitted (stamped with the hash
// docs/hash.md gives, or cleanly left alone) or rejected with a clear answer, with a log
// line and a metric for every rejection or degradation, and configstamp still serving.
package badinput

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
	// The admin client's API warnings (configstamp's, on odd specs) would otherwise print
	// controller-runtime's "SetLogger was never called" stack.
	ctrllog.SetLogger(logr.Discard())
	os.Exit(framework.Main(m, cluster.Options{}, func(_ context.Context, e *framework.Env) (func(bool), error) {
		env, k8s = e, e.Client
		return func(bool) {}, nil
	}))
}
