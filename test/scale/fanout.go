package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

// fanout: one ConfigMap consumed by n Deployments; time from its edit until all are
// re-stamped, at the default client rate limit and at --kube-api-qps 200, and the
// requests configstamp sent for the change (from the API server's audit log).
func fanout(ctx context.Context, env *framework.Env, cfg config) ([]row, error) {
	cs := clients(env)
	const ns = "fanout"
	if err := namespace(ctx, cs, ns); err != nil {
		return nil, err
	}
	if err := createConfigMaps(ctx, cs, ns, 1, 1<<10); err != nil {
		return nil, err
	}
	n := cfg.deployments
	var rows []row
	for run, args := range [][]string{nil, {"--kube-api-qps", "200", "--kube-api-burst", "400"}} {
		p, err := env.Run(ctx, framework.Options{Args: append([]string{"--debounce", "0s"}, args...)})
		if err != nil {
			return nil, err
		}
		if run == 0 {
			if err := parallel(n, 16, func(i int) error {
				_, err := cs.AppsV1().Deployments(ns).Create(ctx, deployment(fmt.Sprintf("d-%05d", i), "cm-00000"), metav1.CreateOptions{})
				return err
			}); err != nil {
				return nil, err
			}
		}
		time.Sleep(5 * time.Second) // start-up checks done
		first, err := cs.AppsV1().Deployments(ns).Get(ctx, "d-00000", metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		old := first.Spec.Template.Annotations[stamp.HashAnnotation]
		mark := markAudit(env.Cluster.AuditLog)
		if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, "cm-00000", types.MergePatchType,
			[]byte(fmt.Sprintf(`{"data":{"run":"%d"}}`, run)), metav1.PatchOptions{}); err != nil {
			return nil, err
		}
		start := time.Now()
		if err := waitFor(10*time.Minute, "all re-stamped", func() (bool, error) {
			list, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
			if err != nil {
				return false, err
			}
			done := 0
			for _, d := range list.Items {
				if h := d.Spec.Template.Annotations[stamp.HashAnnotation]; h != old && h != "" {
					done++
				}
			}
			return done == n, nil
		}); err != nil {
			return nil, err
		}
		took := time.Since(start)
		time.Sleep(3 * time.Second)
		reqs, err := requestsSince(env.Cluster.AuditLog, mark)
		if err != nil {
			return nil, err
		}
		p.Stop()
		limit := "default client rate limit (20 qps)"
		if run == 1 {
			limit = "--kube-api-qps 200"
		}
		rows = append(rows,
			row{fmt.Sprintf("fan-out: %d Deployments re-stamped, %s", n, limit), took.Round(10 * time.Millisecond).String()},
			row{fmt.Sprintf("requests configstamp sent for that change (%d dependents)", n), formatRequests(reqs)},
		)
	}
	return rows, nil
}
