// Package waves proves health-gated waves on a control plane whose workloads really roll
// (kube-controller-manager, kwok): a bad change of a shared ConfigMap rolls its canary
// alone and halts when the canary does not become available; the fix rolls the canary,
// then each wave once the one before is available, every workload exactly once, across a
// SIGKILL of configstamp. "Bad" is real to the Deployment controller: kwok never makes a
// pod Ready whose config hash is the bad content's (cluster.Options.NotReadyHashes),
// computed beforehand as `configstamp hash` does (test/hashdoc). TestWavePaths takes the
// other paths: waves on by a namespace's label and a Secret's annotation, off, DaemonSet
// and Argo Rollout members, --waves-deadline, objects written by kubectl apply.
package waves

import (
	"context"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/hashdoc"
)

var env *framework.Env

// The namespaces of the two ways: workloads created before configstamp first starts,
// and after. Fixed, as the bad content's hash (keyed per namespace) is computed before
// the cluster starts.
const (
	nsBefore = "waves-before"
	nsAfter  = "waves-after"
	nsCLI    = "waves-cli"
	// The paths of TestWavePaths, each in its own namespace.
	nsLabel    = "waves-label"
	nsSecret   = "waves-secret"
	nsOff      = "waves-off"
	nsKinds    = "waves-kinds"
	nsDeadline = "waves-deadline"
	nsApply    = "waves-apply"
)

// badData is the ConfigMap content whose pods never become Ready.
var badData = map[string]string{"mode": "bad"}

// fixData is the fix of badData.
var fixData = map[string]string{"mode": "fixed"}

// hashOf is the config hash of a template that consumes the ConfigMap shared (envFrom)
// holding data, in namespace.
func hashOf(namespace string, data map[string]string) string {
	cm := &corev1.ConfigMap{Data: data}
	return hashdoc.Hash([]hashdoc.Source{{Name: "shared", EnvOnly: true}}, func(string) *corev1.ConfigMap { return cm },
		framework.HashKey, namespace)
}

// lastData is the content of the ConfigMap extra that, with the fix in shared, keeps the
// pods of the last consumer of TestHaltResume (e05, which reads both) from becoming
// Ready: its last wave fails.
var lastData = map[string]string{"extra": "last"}

// hashWithExtra is hashOf for a template that reads the ConfigMap extra too.
func hashWithExtra(namespace string, data, extra map[string]string) string {
	cms := map[string]*corev1.ConfigMap{"shared": {Data: data}, "extra": {Data: extra}}
	return hashdoc.Hash([]hashdoc.Source{{Name: "extra", EnvOnly: true}, {Name: "shared", EnvOnly: true}}, func(n string) *corev1.ConfigMap { return cms[n] },
		framework.HashKey, namespace)
}

// secretHashOf is hashOf for a template that consumes the Secret shared (envFrom).
func secretHashOf(namespace string, data map[string]string) string {
	cm := &corev1.ConfigMap{Data: data}
	return hashdoc.Keyed([]hashdoc.Source{{Name: "shared", EnvOnly: true, Secret: true}}, func(bool, string) *corev1.ConfigMap { return cm },
		framework.HashKey, namespace)
}

func TestMain(m *testing.M) {
	bad := []string{secretHashOf(nsSecret, badData)}
	for _, ns := range []string{nsBefore, nsAfter, nsCLI, nsLabel, nsOff, nsDeadline} {
		bad = append(bad, hashOf(ns, badData))
	}
	bad = append(bad, hashWithExtra(nsCLI, fixData, lastData))
	opts := cluster.Options{Controllers: true, NotReadyHashes: bad}
	os.Exit(framework.Main(m, opts, func(_ context.Context, e *framework.Env) (func(bool), error) {
		env = e
		return func(bool) {}, nil
	}))
}
