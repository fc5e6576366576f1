package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configstamp/configstamp/test/framework"
)

// memory: RSS of configstamp with n ConfigMaps of size bytes and n Deployments, each
// consuming one, at rest and after every ConfigMap changed once (every Deployment
// checked and nudged: the reads are transient, nothing is cached).
func memory(ctx context.Context, env *framework.Env, cfg config, size int) ([]row, error) {
	cs := clients(env)
	args, metricsAddr := metricsArgs()
	p, err := env.Run(ctx, framework.Options{Args: append(args, "--debounce", "500ms")})
	if err != nil {
		return nil, err
	}
	defer p.Stop()
	const ns = "memory"
	if err := namespace(ctx, cs, ns); err != nil {
		return nil, err
	}
	start := time.Now()
	if err := createConfigMaps(ctx, cs, ns, cfg.configMaps, size); err != nil {
		return nil, err
	}
	n := min(cfg.deployments, cfg.configMaps)
	if err := parallel(n, 16, func(i int) error {
		_, err := cs.AppsV1().Deployments(ns).Create(ctx, deployment(fmt.Sprintf("d-%05d", i), fmt.Sprintf("cm-%05d", i)), metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	fmt.Printf("  created %d ConfigMaps and %d Deployments in %s\n", cfg.configMaps, n, time.Since(start).Round(time.Second))
	// Steady state: the Go runtime forces a collection at least every 2 minutes and then
	// returns freed memory to the OS; sampling sooner measures the last burst's garbage.
	steady := func() (int64, float64, error) {
		time.Sleep(150 * time.Second)
		var peak int64
		for i := 0; i < 5; i++ {
			r, err := rss(p.PID())
			if err != nil {
				return 0, 0, err
			}
			peak = max(peak, r)
			time.Sleep(time.Second)
		}
		heap, err := metric(metricsAddr, "go_memstats_heap_inuse_bytes")
		return peak, heap, err
	}
	atRest, heapRest, err := steady()
	if err != nil {
		return nil, err
	}
	// Change every ConfigMap once.
	before, _ := metric(metricsAddr, "configstamp_nudges_total")
	if err := parallel(cfg.configMaps, 16, func(i int) error {
		_, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, fmt.Sprintf("cm-%05d", i), types.MergePatchType,
			[]byte(`{"data":{"changed":"yes"}}`), metav1.PatchOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	if err := waitFor(5*time.Minute, "every Deployment nudged", func() (bool, error) {
		v, err := metric(metricsAddr, "configstamp_nudges_total")
		return v-before >= float64(n), err
	}); err != nil {
		return nil, err
	}
	afterChange, heapChange, err := steady()
	if err != nil {
		return nil, err
	}
	label := fmt.Sprintf("%d ConfigMaps of %s, %d Deployments", cfg.configMaps, sizeName(size), n)
	return []row{
		{"RSS at rest, " + label, fmt.Sprintf("%s (Go heap in use %s)", mib(atRest), mib(int64(heapRest)))},
		{"RSS after every ConfigMap changed once, " + label, fmt.Sprintf("%s (Go heap in use %s)", mib(afterChange), mib(int64(heapChange)))},
	}, nil
}
