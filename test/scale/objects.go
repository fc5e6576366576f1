package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

// clients returns a fast admin clientset for driving the cluster.
func clients(env *framework.Env) *kubernetes.Clientset {
	cfg := rest.CopyConfig(env.Cluster.Config)
	cfg.QPS, cfg.Burst = 2000, 4000
	return kubernetes.NewForConfigOrDie(cfg)
}

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(n, workers int, f func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

func namespace(ctx context.Context, cs kubernetes.Interface, name string) error {
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{stamp.InjectLabel: stamp.InjectValue}}}, metav1.CreateOptions{})
	return err
}

// configMap has one key of size bytes (distinct per name).
func configMap(name string, size int) *corev1.ConfigMap {
	fill := strings.Repeat(name+"\n", size/(len(name)+1)+1)[:size]
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"config.yaml": fill}}
}

// deployment consumes the named ConfigMaps through volumes; replicas 0: the object is
// what configstamp handles, pods are not needed.
func deployment(name string, cms ...string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
			}},
		},
	}
	for _, cm := range cms {
		d.Spec.Template.Spec.Volumes = append(d.Spec.Template.Spec.Volumes, corev1.Volume{Name: cm,
			VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}})
	}
	return d
}

func createConfigMaps(ctx context.Context, cs kubernetes.Interface, ns string, n, size int) error {
	return parallel(n, 16, func(i int) error {
		_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, configMap(fmt.Sprintf("cm-%05d", i), size), metav1.CreateOptions{})
		return err
	})
}

// rss is the resident set size of a process, from /proc.
func rss(pid int) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS")
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// metric reads one unlabelled value from configstamp's Prometheus endpoint.
func metric(addr, name string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, name+" ") {
			return strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, name)), 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found", name)
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
