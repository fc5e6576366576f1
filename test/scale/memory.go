package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

// memoryResult is one memory run's figures, for comparing the ways of writing.
type memoryResult struct{ atRest, afterChange, heapRest, heapChange int64 }

// memory: RSS of configstamp with n ConfigMaps (source stamp.KindConfigMap) or n
// Secrets (stamp.KindSecret; configstamp runs with --secrets) of size bytes (in keys of
// memoryKeySize) and n Deployments, each consuming one through a volume, at rest and
// after every source changed once (every Deployment checked and nudged: the reads are
// transient, nothing is cached). write is writePlain or writeClientSideApply.
func memory(ctx context.Context, env *framework.Env, cfg config, source string, size int, write string) ([]row, memoryResult, error) {
	var res memoryResult
	cs := clients(env)
	args, metricsAddr := metricsArgs()
	args = append(args, "--debounce", "500ms")
	if source == stamp.KindSecret {
		more, err := secretArgs(ctx, cs)
		if err != nil {
			return nil, res, err
		}
		args = append(args, more...)
	}
	p, err := env.Run(ctx, framework.Options{Args: args})
	if err != nil {
		return nil, res, err
	}
	defer p.Stop()
	const ns = "memory"
	if err := namespace(ctx, cs, ns); err != nil {
		return nil, res, err
	}
	srcName := func(i int) string { return fmt.Sprintf("cm-%05d", i) }
	if source == stamp.KindSecret {
		srcName = func(i int) string { return fmt.Sprintf("secret-%05d", i) }
	}
	start := time.Now()
	if err := parallel(cfg.configMaps, 16, func(i int) error {
		return createSource(ctx, cs, ns, source, srcName(i), size, write)
	}); err != nil {
		return nil, res, err
	}
	n := min(cfg.deployments, cfg.configMaps)
	if err := parallel(n, 16, func(i int) error {
		d := deployment(fmt.Sprintf("d-%05d", i), srcName(i))
		if source == stamp.KindSecret {
			d = secretDeployment(fmt.Sprintf("d-%05d", i), srcName(i))
		}
		if write == writeClientSideApply {
			return appliedDeployment(ctx, cs, ns, d)
		}
		_, err := cs.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, res, err
	}
	fmt.Printf("  created %d %s and %d Deployments in %s\n", cfg.configMaps, sourceNames(source), n, time.Since(start).Round(time.Second))
	if write == writeClientSideApply {
		describe := describeApplied
		if source == stamp.KindSecret {
			describe = describeAppliedSecret
		}
		what, err := describe(ctx, cs, ns, srcName(0))
		if err != nil {
			return nil, res, err
		}
		fmt.Printf("  each %s: %s\n", sourceName(source), what)
	}
	// Every Deployment was stamped with its source's digest (for a Secret, keyed).
	d, err := cs.AppsV1().Deployments(ns).Get(ctx, fmt.Sprintf("d-%05d", n-1), metav1.GetOptions{})
	if err != nil {
		return nil, res, err
	}
	if got, want := d.Spec.Template.Annotations[stamp.SourcesAnnotation], source+"/"; !strings.HasPrefix(got, want) {
		return nil, res, fmt.Errorf("deployment %s: sources annotation %q, want %s...", d.Name, got, want)
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
	// Change every source once (client-side apply: re-applied, so the annotation changes
	// too).
	before, _ := metric(metricsAddr, "configstamp_nudges_total")
	if err := parallel(cfg.configMaps, 16, func(i int) error {
		return changeSource(ctx, cs, ns, source, srcName(i), size, write)
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
	label := fmt.Sprintf("%d %s of %s, %d Deployments, written %s", cfg.configMaps, sourceNames(source), sizeName(size), n, write)
	return []row{
		{"RSS at rest, " + label, fmt.Sprintf("%s (Go heap in use %s)", mib(atRest), mib(int64(heapRest)))},
		{"RSS after every " + sourceName(source) + " changed once, " + label, fmt.Sprintf("%s (Go heap in use %s)", mib(afterChange), mib(int64(heapChange)))},
	}, res, nil
}
