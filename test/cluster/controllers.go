package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/configstamp/configstamp/stamp"
)

// kwokStages is the stages file kwok runs with: the one beside the binaries, with the
// pod-ready Stage kept off pods of Options.NotReadyHashes.
func (c *Cluster) kwokStages() (string, error) {
	path := filepath.Join(c.opts.BinDir, "kwok-stages.yaml")
	if len(c.opts.NotReadyHashes) == 0 {
		return path, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := string(b)
	at := strings.Index(s, "name: pod-ready\n")
	anchor := "    matchExpressions:\n"
	i := strings.Index(s[max(at, 0):], anchor)
	if at < 0 || i < 0 {
		return "", fmt.Errorf("%s: no pod-ready Stage with matchExpressions", path)
	}
	extra := "    - key: '.metadata.annotations[\"" + stamp.HashAnnotation + "\"]'\n      operator: 'NotIn'\n      values:\n"
	for _, h := range c.opts.NotReadyHashes {
		extra += "      - '" + h + "'\n"
	}
	i += at + len(anchor)
	out := filepath.Join(c.Dir, "kwok-stages.yaml")
	return out, os.WriteFile(out, []byte(s[:i]+extra+s[i:]), 0o600)
}

// startControllers runs kube-controller-manager, kube-scheduler and kwok, registers the
// fake nodes and waits until they are Ready.
func (c *Cluster) startControllers(ctx context.Context, pki pkiFiles) error {
	kc := c.Kubeconfig
	if err := c.run("kube-controller-manager", "--kubeconfig", kc, "--authentication-kubeconfig", kc,
		"--authorization-kubeconfig", kc, "--bind-address", "127.0.0.1", "--secure-port", "0",
		// nodeipam needs a cluster CIDR; node lifecycle must stay on: it removes the
		// not-ready taint from kwok's nodes.
		"--controllers", "*,-nodeipam", "--use-service-account-credentials=false",
		"--service-account-private-key-file", pki.saKey, "--root-ca-file", pki.ca,
		"--leader-elect=false", "--concurrent-deployment-syncs", "10", "--concurrent-replicaset-syncs", "10",
		"--kube-api-qps", "500", "--kube-api-burst", "1000"); err != nil {
		return err
	}
	if err := c.run("kube-scheduler", "--kubeconfig", kc, "--authentication-kubeconfig", kc,
		"--authorization-kubeconfig", kc, "--bind-address", "127.0.0.1", "--secure-port", "0", "--leader-elect=false",
		"--kube-api-qps", "500", "--kube-api-burst", "1000"); err != nil {
		return err
	}
	stages, err := c.kwokStages()
	if err != nil {
		return err
	}
	if err := c.run("kwok", "--kubeconfig", kc, "--config", stages,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--cidr=10.244.0.0/16", "--node-ip=10.244.0.1"); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	for i := 1; i <= c.opts.Nodes; i++ {
		name := fmt.Sprintf("kwok-node-%d", i)
		capacity := corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("320"), corev1.ResourceMemory: resource.MustParse("1Ti"),
			corev1.ResourcePods: resource.MustParse("10000"),
		}
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name,
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
				Labels:      map[string]string{"kubernetes.io/hostname": name, "type": "kwok"}},
			Status: corev1.NodeStatus{Allocatable: capacity, Capacity: capacity},
		}
		if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create node %s: %w", name, err)
		}
	}
	c.opts.Log("waiting for %d kwok nodes to be Ready and untainted", c.opts.Nodes)
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, n := range nodes.Items {
			if len(n.Spec.Taints) > 0 {
				continue
			}
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == c.opts.Nodes, nil
	})
}
