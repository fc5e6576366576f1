package main

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/configstamp/configstamp/test/bench"
	"github.com/configstamp/configstamp/test/cluster"
)

// Shared with test/soak: see test/bench.
var (
	clients    = bench.Clients
	parallel   = bench.Parallel
	namespace  = bench.Namespace
	configMap  = bench.ConfigMap
	deployment = bench.Deployment
	rss        = bench.RSS
	mib        = bench.MiB
	metric     = bench.Metric
)

func createConfigMaps(ctx context.Context, cs kubernetes.Interface, ns string, n, size int) error {
	return parallel(n, 16, func(i int) error {
		_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, configMap(fmt.Sprintf("cm-%05d", i), size), metav1.CreateOptions{})
		return err
	})
}

// metricsArgs gives configstamp a metrics endpoint and returns its address.
func metricsArgs() ([]string, string) {
	port, err := cluster.FreePort()
	if err != nil {
		fail(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	return []string{"--metrics-bind-address", addr, "--zap-log-level", "info", "--zap-time-encoding", "rfc3339nano"}, addr
}

// waitFor polls f until true or the timeout.
func waitFor(timeout time.Duration, what string, f func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := f()
		if err == nil && ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s (%v)", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// statefulSet consumes the named ConfigMaps through volumes; replicas 0, like deployment.
func statefulSet(name string, cms ...string) *appsv1.StatefulSet {
	d := deployment(name, cms...)
	return &appsv1.StatefulSet{
		ObjectMeta: d.ObjectMeta,
		Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To[int32](0), Selector: d.Spec.Selector, ServiceName: name, Template: d.Spec.Template},
	}
}

// noNode is a node label no node carries: a DaemonSet selecting it has no pods (the
// scale harness runs no kubelets and no controllers anyway).
const noNode = "configstamp.io/scale-no-such-node"

// daemonSet consumes the named ConfigMaps through volumes; its node selector matches no
// node, so it has no pods.
func daemonSet(name string, cms ...string) *appsv1.DaemonSet {
	d := deployment(name, cms...)
	d.Spec.Template.Spec.NodeSelector = map[string]string{noNode: "true"}
	return &appsv1.DaemonSet{
		ObjectMeta: d.ObjectMeta,
		Spec:       appsv1.DaemonSetSpec{Selector: d.Spec.Selector, Template: d.Spec.Template},
	}
}
