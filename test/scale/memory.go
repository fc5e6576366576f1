package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configstamp/configstamp/test/framework"
)

// memoryResult is one memory run's figures, for comparing the ways of writing.
type memoryResult struct{ atRest, afterChange, heapRest, heapChange int64 }

// memory: RSS of configstamp with n ConfigMaps of size bytes (in keys of
// memoryKeySize) and n Deployments, each consuming one, at rest and after every
// ConfigMap changed once (every Deployment checked and nudged: the reads are transient,
// nothing is cached). write is writePlain or writeClientSideApply.
func memory(ctx context.Context, env *framework.Env, cfg config, size int, write string) ([]row, memoryResult, error) {
	var res memoryResult
	cs := clients(env)
	args, metricsAddr := metricsArgs()
	p, err := env.Run(ctx, framework.Options{Args: append(args, "--debounce", "500ms")})
	if err != nil {
		return nil, res, err
	}
	defer p.Stop()
	const ns = "memory"
	if err := namespace(ctx, cs, ns); err != nil {
		return nil, res, err
	}
	start := time.Now()
	if err := parallel(cfg.configMaps, 16, func(i int) error {
		cm := multiKeyConfigMap(fmt.Sprintf("cm-%05d", i), size)
		if write == writeClientSideApply {
			return appliedConfigMap(ctx, cs, ns, cm)
		}
		_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, res, err
	}
	n := min(cfg.deployments, cfg.configMaps)
	if err := parallel(n, 16, func(i int) error {
		d := deployment(fmt.Sprintf("d-%05d", i), fmt.Sprintf("cm-%05d", i))
		if write == writeClientSideApply {
			return appliedDeployment(ctx, cs, ns, d)
		}
		_, err := cs.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, res, err
	}
	fmt.Printf("  created %d ConfigMaps and %d Deployments in %s\n", cfg.configMaps, n, time.Since(start).Round(time.Second))
	if write == writeClientSideApply {
		what, err := describeApplied(ctx, cs, ns, "cm-00000")
		if err != nil {
			return nil, res, err
		}
		fmt.Printf("  each ConfigMap: %s\n", what)
	}
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
		return nil, res, err
	}
	// Change every ConfigMap once (client-side apply: re-applied, so the annotation
	// changes too).
	before, _ := metric(metricsAddr, "configstamp_nudges_total")
	if err := parallel(cfg.configMaps, 16, func(i int) error {
		name := fmt.Sprintf("cm-%05d", i)
		if write == writeClientSideApply {
			return reapplyConfigMap(ctx, cs, ns, multiKeyConfigMap(name, size), "changed", "yes")
		}
		_, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType,
			[]byte(`{"data":{"changed":"yes"}}`), metav1.PatchOptions{})
		return err
	}); err != nil {
		return nil, res, err
	}
	if err := waitFor(5*time.Minute, "every Deployment nudged", func() (bool, error) {
		v, err := metric(metricsAddr, "configstamp_nudges_total")
		return v-before >= float64(n), err
	}); err != nil {
		return nil, res, err
	}
	afterChange, heapChange, err := steady()
	if err != nil {
		return nil, res, err
	}
	res = memoryResult{atRest: atRest, afterChange: afterChange, heapRest: int64(heapRest), heapChange: int64(heapChange)}
	label := fmt.Sprintf("%d ConfigMaps of %s, %d Deployments, written %s", cfg.configMaps, sizeName(size), n, write)
	return []row{
		{"RSS at rest, " + label, fmt.Sprintf("%s (Go heap in use %s)", mib(atRest), mib(int64(heapRest)))},
		{"RSS after every ConfigMap changed once, " + label, fmt.Sprintf("%s (Go heap in use %s)", mib(afterChange), mib(int64(heapChange)))},
	}, res, nil
}
