package main

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/bench"
)

// object is one Deployment and the ConfigMap it consumes (all keys, through a volume).
// An adopted one exists before configstamp starts.
type object struct {
	namespace, configMap, deployment string
	adopted                          bool
}

func (o object) key() string { return o.namespace + "/" + o.deployment }

func (o object) configMapKey() string { return o.namespace + "/" + o.configMap }

// objects names cfg.deployments pairs, spread over cfg.namespaces namespaces; the
// first half is adopted.
func objects(cfg config) []object {
	out := make([]object, cfg.deployments)
	for i := range out {
		out[i] = object{namespace: fmt.Sprintf("soak-%d", i%cfg.namespaces), configMap: fmt.Sprintf("cm-%05d", i),
			deployment: fmt.Sprintf("d-%05d", i), adopted: i < cfg.deployments/2}
	}
	return out
}

// revisionKey is the ConfigMap key each edit sets to the number of edits made so far:
// the ConfigMap itself says how many rollouts its Deployment owes.
const revisionKey = "revision"

// populate creates the namespaces (opted in) and, for each object, its ConfigMap and
// then its Deployment (the webhook reads the ConfigMap when it stamps the creation).
func populate(ctx context.Context, cs kubernetes.Interface, cfg config, objs []object) error {
	start := time.Now()
	for n := 0; n < cfg.namespaces; n++ {
		if err := bench.Namespace(ctx, cs, fmt.Sprintf("soak-%d", n)); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	err := bench.Parallel(len(objs), 16, func(i int) error {
		o := objs[i]
		cm := bench.ConfigMap(o.configMap, 1<<10)
		cm.Data[revisionKey] = "0"
		if _, err := cs.CoreV1().ConfigMaps(o.namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return err
		}
		_, err := cs.AppsV1().Deployments(o.namespace).Create(ctx, bench.Deployment(o.deployment, o.configMap), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	fmt.Printf("  created %d ConfigMaps and %d Deployments in %s\n", len(objs), len(objs), time.Since(start).Round(time.Second))
	return nil
}

// deployments lists every Deployment in the objects' namespaces, by namespace/name.
func deployments(ctx context.Context, cs kubernetes.Interface, objs []object) (map[string]*appsv1.Deployment, error) {
	out := map[string]*appsv1.Deployment{}
	for _, ns := range namespaces(objs) {
		list, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for i := range list.Items {
			d := &list.Items[i]
			out[d.Namespace+"/"+d.Name] = d
		}
	}
	return out, nil
}

// configMaps lists every ConfigMap in the objects' namespaces, by namespace/name.
func configMaps(ctx context.Context, cs kubernetes.Interface, objs []object) (map[string]*corev1.ConfigMap, error) {
	out := map[string]*corev1.ConfigMap{}
	for _, ns := range namespaces(objs) {
		list, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for i := range list.Items {
			cm := &list.Items[i]
			out[cm.Namespace+"/"+cm.Name] = cm
		}
	}
	return out, nil
}

func namespaces(objs []object) []string {
	var out []string
	seen := map[string]bool{}
	for _, o := range objs {
		if !seen[o.namespace] {
			seen[o.namespace] = true
			out = append(out, o.namespace)
		}
	}
	return out
}

// waitAdopted waits until configstamp has written its record (no rollout) on every
// Deployment that existed before it started, and returns how long that took.
func waitAdopted(ctx context.Context, cs kubernetes.Interface, objs []object, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		deps, err := deployments(ctx, cs, objs)
		if err != nil {
			return 0, err
		}
		recorded := 0
		for _, o := range objs {
			if d := deps[o.key()]; d != nil && d.Annotations[stamp.ObservedAnnotation] != "" {
				recorded++
			}
		}
		took := time.Since(start)
		fmt.Printf("  %s: %d of %d adopted Deployments recorded\n", took.Round(time.Second), recorded, len(objs))
		if recorded == len(objs) {
			return took, nil
		}
		if took > timeout {
			return 0, fmt.Errorf("only %d of %d Deployments recorded after %s", recorded, len(objs), timeout)
		}
		time.Sleep(10 * time.Second)
	}
}
