package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/test/framework"
)

// restart: configstamp restarted over n up-to-date stamped Deployments (each consuming
// its own ConfigMap): the requests it sends, the admissions it causes, the generations.
func restart(ctx context.Context, env *framework.Env, cfg config) ([]row, error) {
	cs := clients(env)
	const ns = "restart"
	if err := namespace(ctx, cs, ns); err != nil {
		return nil, err
	}
	n := cfg.deployments
	if err := createConfigMaps(ctx, cs, ns, n, 1<<10); err != nil {
		return nil, err
	}
	first, err := env.Run(ctx, framework.Options{})
	if err != nil {
		return nil, err
	}
	if err := parallel(n, 16, func(i int) error {
		_, err := cs.AppsV1().Deployments(ns).Create(ctx, deployment(fmt.Sprintf("d-%05d", i), fmt.Sprintf("cm-%05d", i)), metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	generations := func() (map[string]int64, error) {
		list, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		out := map[string]int64{}
		for _, d := range list.Items {
			out[d.Name] = d.Generation
		}
		return out, nil
	}
	before, err := generations()
	if err != nil {
		return nil, err
	}
	first.Stop()

	mark := markAudit(env.Cluster.AuditLog)
	args, metricsAddr := metricsArgs()
	second, err := env.Run(ctx, framework.Options{Args: args})
	if err != nil {
		return nil, err
	}
	defer second.Stop()
	restarted := time.Now()
	if err := waitFor(10*time.Minute, "start-up re-check done", func() (bool, error) {
		v, err := metric(metricsAddr, `configstamp_checks_total{result="current"}`)
		return v >= float64(n), err
	}); err != nil {
		return nil, err
	}
	recheck := time.Since(restarted)
	time.Sleep(5 * time.Second)
	after, err := generations()
	if err != nil {
		return nil, err
	}
	changed := 0
	for name, g := range after {
		if before[name] != g {
			changed++
		}
	}
	reqs, err := requestsSince(env.Cluster.AuditLog, mark)
	if err != nil {
		return nil, err
	}
	nudges, _ := metric(metricsAddr, "configstamp_nudges_total")
	// Admissions the restart caused (the readiness probe's dry runs aside).
	admissions := 0
	for _, rec := range second.Logs() {
		if rec["msg"] == "Stamped config hash" && rec["dryRun"] != true && rec["namespace"] == ns {
			admissions++
		}
	}
	label := fmt.Sprintf("restart over %d up-to-date stamped Deployments", n)
	return []row{
		{label + ": re-check of every stamped Deployment done after", recheck.Round(100 * time.Millisecond).String()},
		{label + ": requests sent", formatRequests(reqs)},
		{label + ": nudges / stamp changes / generations changed", fmt.Sprintf("%.0f / %d / %d", nudges, admissions, changed)},
	}, nil
}

// coldStart: time from process start until configstamp stamps through the API server
// (webhook registered and serving) and until its watcher's caches are synced, with
// coldStart Deployments present.
func coldStart(ctx context.Context, env *framework.Env, cfg config) ([]row, error) {
	cs := clients(env)
	const ns = "coldstart"
	if err := namespace(ctx, cs, ns); err != nil {
		return nil, err
	}
	if err := createConfigMaps(ctx, cs, ns, 1, 1<<10); err != nil {
		return nil, err
	}
	if err := parallel(cfg.coldStart, 32, func(i int) error {
		_, err := cs.AppsV1().Deployments(ns).Create(ctx, deployment(fmt.Sprintf("d-%05d", i), "cm-00000"), metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	args, _ := metricsArgs()
	start := time.Now()
	p, err := env.Run(ctx, framework.Options{Args: args})
	if err != nil {
		return nil, err
	}
	defer p.Stop()
	serving := time.Since(start)
	var synced time.Duration
	if err := waitFor(time.Minute, "watcher synced", func() (bool, error) {
		for _, rec := range p.Logs() {
			if rec["msg"] == "Starting workers" && rec["controller"] == "deployment" {
				ts, err := time.Parse(time.RFC3339Nano, fmt.Sprint(rec["ts"]))
				if err != nil {
					return false, err
				}
				synced = ts.Sub(start)
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return nil, err
	}
	label := fmt.Sprintf("cold start with %d Deployments", cfg.coldStart)
	return []row{
		{label + ": stamping through the API server (webhook registered, serving)", serving.Round(10 * time.Millisecond).String()},
		{label + ": watcher caches synced", synced.Round(10 * time.Millisecond).String()},
	}, nil
}
