package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

// latency: time from a ConfigMap edit (the API's response) to the Deployment carrying
// the new stamp (seen through a watch), over `edits` edits, with --debounce 0 and the
// default.
func latency(ctx context.Context, env *framework.Env, cfg config) ([]row, error) {
	cs := clients(env)
	var rows []row
	for _, debounce := range []string{"0s", "2s"} {
		ns := "latency-" + debounce[:1]
		if err := namespace(ctx, cs, ns); err != nil {
			return nil, err
		}
		if err := createConfigMaps(ctx, cs, ns, 1, 1<<10); err != nil {
			return nil, err
		}
		p, err := env.Run(ctx, framework.Options{Args: []string{"--debounce", debounce}})
		if err != nil {
			return nil, err
		}
		if _, err := cs.AppsV1().Deployments(ns).Create(ctx, deployment("app", "cm-00000"), metav1.CreateOptions{}); err != nil {
			return nil, err
		}
		var lat []time.Duration
		for i := 0; i < cfg.edits; i++ {
			w, err := cs.AppsV1().Deployments(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=app"})
			if err != nil {
				return nil, err
			}
			cur, err := cs.AppsV1().Deployments(ns).Get(ctx, "app", metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			old := cur.Spec.Template.Annotations[stamp.HashAnnotation]
			if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, "cm-00000", types.MergePatchType,
				[]byte(fmt.Sprintf(`{"data":{"edit":"%d"}}`, i)), metav1.PatchOptions{}); err != nil {
				return nil, err
			}
			// Measured from the edit's response: the change is stored.
			d, err := waitHashChange(w, old, 30*time.Second)
			w.Stop()
			if err != nil {
				return nil, fmt.Errorf("edit %d: %w", i, err)
			}
			lat = append(lat, d)
		}
		p.Stop()
		slices.Sort(lat)
		rows = append(rows, row{fmt.Sprintf("change to stamp p50 / p95, --debounce %s (%d edits)", debounce, cfg.edits),
			fmt.Sprintf("%s / %s", ms(pct(lat, 50)), ms(pct(lat, 95)))})
	}
	return rows, nil
}

// waitHashChange returns how long until the watched Deployment's stamp differs from old.
func waitHashChange(w watch.Interface, old string, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return 0, fmt.Errorf("watch closed")
			}
			if d, ok := ev.Object.(*appsv1.Deployment); ok && d.Spec.Template.Annotations[stamp.HashAnnotation] != old {
				return time.Since(start), nil
			}
		case <-deadline:
			return 0, fmt.Errorf("stamp unchanged after %s", timeout)
		}
	}
}
