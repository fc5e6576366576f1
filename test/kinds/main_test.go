// Package kinds proves, on a control plane whose workloads really roll
// (kube-controller-manager, kube-scheduler, kwok), that configstamp stamps and rolls
// every kind of workload it supports exactly once per config change and never
// otherwise: StatefulSets and DaemonSets (counted as ControllerRevisions) on workloads
// created before configstamp first started and after; Argo Rollouts (counted as
// generations, no Argo controller needed) with the CRD installed after configstamp
// started and before; CronJobs (counted as generations: restamped once per change, no Job
// started; a Job copied from one runs pods with its stamp and is never written after),
// installed over and created after; workloads opted in by their own label (counted as ReplicaSets),
// handled once per request when they match both ways; and the extra-sources annotation.
// Flux HelmReleases (their CRD, no helm-controller) get one reconcile request per change
// of the values they take (flux_test.go).
package kinds

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
	ctrllog.SetLogger(logr.Discard()) // the clients' warnings are read by the tests that expect them
	os.Exit(framework.Main(m, cluster.Options{Controllers: true}, func(ctx context.Context, e *framework.Env) (func(bool), error) {
		env = e
		// Everything here runs under the chart's policy restricting configstamp's own
		// identity (selfpolicy_test.go).
		remove, err := e.InstallSelfPolicy(ctx)
		if err != nil {
			return nil, err
		}
		return func(bool) { remove() }, nil
	}))
}
