package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/webhook"
)

// admission: latency of Deployment UPDATEs (each changes the pod template, so the
// webhook reads and hashes 5 ConfigMaps of 64 KiB) through the API server, from
// `writers` concurrent writers, without and with the webhook registered.
func admission(ctx context.Context, env *framework.Env, cfg config) ([]row, error) {
	cs := clients(env)
	const ns = "admission"
	if err := namespace(ctx, cs, ns); err != nil {
		return nil, err
	}
	var cms []string
	for i := 0; i < 5; i++ {
		cms = append(cms, fmt.Sprintf("cm-%05d", i))
	}
	if err := createConfigMaps(ctx, cs, ns, 5, 64<<10); err != nil {
		return nil, err
	}
	for w := 0; w < cfg.writers; w++ {
		if _, err := cs.AppsV1().Deployments(ns).Create(ctx, deployment(fmt.Sprintf("w-%02d", w), cms...), metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	without, err := updateLatencies(ctx, cs, ns, cfg, "without")
	if err != nil {
		return nil, err
	}
	serial := cfg
	serial.writers = 1
	withoutSerial, err := updateLatencies(ctx, cs, ns, serial, "without")
	if err != nil {
		return nil, err
	}
	args, metricsAddr := metricsArgs()
	if profileDir != "" {
		args = append(args, "--pprof-bind-address", "127.0.0.1:6060")
		go profile(ctx, env, 5*time.Second)
	}
	p, err := env.Run(ctx, framework.Options{Args: args})
	if err != nil {
		return nil, err
	}
	defer p.Stop()
	with, err := updateLatencies(ctx, cs, ns, cfg, "with")
	if err != nil {
		return nil, err
	}
	withSerial, err := updateLatencies(ctx, cs, ns, serial, "with")
	if err != nil {
		return nil, err
	}
	label := fmt.Sprintf("%d writers x %d updates, 5 ConfigMaps x 64 KiB", cfg.writers, cfg.updates)
	sum, _ := metric(metricsAddr, `configstamp_admission_duration_seconds_sum{result="stamped"}`)
	count, _ := metric(metricsAddr, `configstamp_admission_duration_seconds_count{result="stamped"}`)
	handler := "n/a"
	if count > 0 {
		handler = ms(time.Duration(sum / count * float64(time.Second)))
	}
	return []row{
		{"Deployment UPDATE p50 / p99 without webhook (" + label + ")", fmt.Sprintf("%s / %s", ms(pct(without, 50)), ms(pct(without, 99)))},
		{"Deployment UPDATE p50 / p99 with webhook (" + label + ")", fmt.Sprintf("%s / %s", ms(pct(with, 50)), ms(pct(with, 99)))},
		{"admission overhead p50 / p99 (difference), 20 writers", fmt.Sprintf("%s / %s", ms(pct(with, 50)-pct(without, 50)), ms(pct(with, 99)-pct(without, 99)))},
		{fmt.Sprintf("Deployment UPDATE p50 / p99, 1 writer x %d updates, without / with webhook", cfg.updates),
			fmt.Sprintf("%s / %s  vs  %s / %s", ms(pct(withoutSerial, 50)), ms(pct(withoutSerial, 99)), ms(pct(withSerial, 50)), ms(pct(withSerial, 99)))},
		{"admission overhead p50 / p99 (difference), 1 writer", fmt.Sprintf("%s / %s", ms(pct(withSerial, 50)-pct(withoutSerial, 50)), ms(pct(withSerial, 99)-pct(withoutSerial, 99)))},
		{"time in configstamp's handler per admission (mean, live reads included)", handler},
	}, nil
}

func updateLatencies(ctx context.Context, cs kubernetes.Interface, ns string, cfg config, phase string) ([]time.Duration, error) {
	if phase == "without" {
		_ = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, webhook.DevConfigurationName, metav1.DeleteOptions{})
		time.Sleep(2 * time.Second) // the API server's webhook informer drops it
	}
	lat := make([][]time.Duration, cfg.writers)
	err := parallel(cfg.writers, cfg.writers, func(w int) error {
		for u := 0; u < cfg.updates; u++ {
			patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"bench/update":"%s-%d-%d"}}}}}`, phase, cfg.writers, u)
			start := time.Now()
			if _, err := cs.AppsV1().Deployments(ns).Patch(ctx, fmt.Sprintf("w-%02d", w), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				return err
			}
			lat[w] = append(lat[w], time.Since(start))
		}
		return nil
	})
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	return all, err
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}
