package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/bench"
	"github.com/configstamp/configstamp/test/framework"
)

// The two runs of a fan-out: configstamp's default client rate limit, then a raised one.
var (
	rateLimitArgs = [][]string{nil, {"--kube-api-qps", "200", "--kube-api-burst", "400"}}
	rateLimits    = []string{"default client rate limit (20 qps)", "--kube-api-qps 200"}
)

// afterChange lets configstamp's last requests for a change land (3 s), counts them in
// the audit log since mark, and stops p.
func afterChange(env *framework.Env, p *framework.Configstamp, mark bench.AuditMark) (map[string]int, error) {
	time.Sleep(3 * time.Second)
	reqs, err := requestsSince(env.Cluster.AuditLog, mark)
	if err != nil {
		return nil, err
	}
	p.Stop()
	return reqs, nil
}

// editForRun changes the fan-out's ConfigMap, cm-00000, for run, and returns where the
// audit log ended before the change.
func editForRun(ctx context.Context, env *framework.Env, ns string, run int) (bench.AuditMark, error) {
	mark := markAudit(env.Cluster.AuditLog)
	_, err := clients(env).CoreV1().ConfigMaps(ns).Patch(ctx, "cm-00000", types.MergePatchType,
		[]byte(fmt.Sprintf(`{"data":{"run":"%d"}}`, run)), metav1.PatchOptions{})
	return mark, err
}

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
	for run, args := range rateLimitArgs {
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
		mark, err := editForRun(ctx, env, ns, run)
		if err != nil {
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
		reqs, err := afterChange(env, p, mark)
		if err != nil {
			return nil, err
		}
		limit := rateLimits[run]
		rows = append(rows,
			row{fmt.Sprintf("fan-out: %d Deployments re-stamped, %s", n, limit), took.Round(10 * time.Millisecond).String()},
			row{fmt.Sprintf("requests configstamp sent for that change (%d dependents)", n), formatRequests(reqs)},
		)
	}
	return rows, nil
}

// fanoutKinds: one ConfigMap consumed by n workloads, a third each Deployments (replicas
// 0), StatefulSets (replicas 0) and DaemonSets (selecting no node); time from its edit
// until every workload's template carries the new stamp (and when the last of each kind
// did), at the default client rate limit and at --kube-api-qps 200, and the requests
// configstamp sent for the change.
func fanoutKinds(ctx context.Context, env *framework.Env, cfg config) ([]row, error) {
	cs := clients(env)
	const ns = "fanout-kinds"
	if err := namespace(ctx, cs, ns); err != nil {
		return nil, err
	}
	if err := createConfigMaps(ctx, cs, ns, 1, 1<<10); err != nil {
		return nil, err
	}
	n := cfg.deployments
	count := [3]int{} // Deployments, StatefulSets, DaemonSets
	for i := 0; i < n; i++ {
		count[i%3]++
	}
	kinds := []string{"Deployments", "StatefulSets", "DaemonSets"}
	// templates returns the pod-template annotations of every workload of each kind.
	templates := func() ([3][]map[string]string, error) {
		var out [3][]map[string]string
		opts := metav1.ListOptions{ResourceVersion: "0"}
		deps, err := cs.AppsV1().Deployments(ns).List(ctx, opts)
		if err != nil {
			return out, err
		}
		for _, d := range deps.Items {
			out[0] = append(out[0], d.Spec.Template.Annotations)
		}
		sts, err := cs.AppsV1().StatefulSets(ns).List(ctx, opts)
		if err != nil {
			return out, err
		}
		for _, s := range sts.Items {
			out[1] = append(out[1], s.Spec.Template.Annotations)
		}
		dss, err := cs.AppsV1().DaemonSets(ns).List(ctx, opts)
		if err != nil {
			return out, err
		}
		for _, d := range dss.Items {
			out[2] = append(out[2], d.Spec.Template.Annotations)
		}
		return out, nil
	}
	var rows []row
	for run, args := range rateLimitArgs {
		p, err := env.Run(ctx, framework.Options{Args: append([]string{"--debounce", "0s"}, args...)})
		if err != nil {
			return nil, err
		}
		if run == 0 {
			if err := parallel(n, 16, func(i int) error {
				var err error
				switch i % 3 {
				case 0:
					_, err = cs.AppsV1().Deployments(ns).Create(ctx, deployment(fmt.Sprintf("d-%05d", i), "cm-00000"), metav1.CreateOptions{})
				case 1:
					_, err = cs.AppsV1().StatefulSets(ns).Create(ctx, statefulSet(fmt.Sprintf("s-%05d", i), "cm-00000"), metav1.CreateOptions{})
				case 2:
					_, err = cs.AppsV1().DaemonSets(ns).Create(ctx, daemonSet(fmt.Sprintf("ds-%05d", i), "cm-00000"), metav1.CreateOptions{})
				}
				return err
			}); err != nil {
				return nil, err
			}
		}
		time.Sleep(5 * time.Second) // start-up checks done
		// Every workload carries the same stamp (one ConfigMap, consumed alike).
		before, err := templates()
		if err != nil {
			return nil, err
		}
		old := ""
		for k := range before {
			if len(before[k]) != count[k] {
				return nil, fmt.Errorf("%d %s, want %d", len(before[k]), kinds[k], count[k])
			}
			for _, ann := range before[k] {
				h := ann[stamp.HashAnnotation]
				if h == "" || (old != "" && h != old) {
					return nil, fmt.Errorf("%s before the change: stamps %q and %q, want one stamp", kinds[k], old, h)
				}
				old = h
			}
		}
		mark, err := editForRun(ctx, env, ns, run)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		var last [3]time.Duration // when the last workload of each kind was seen re-stamped
		if err := waitFor(10*time.Minute, "all re-stamped", func() (bool, error) {
			now, err := templates()
			if err != nil {
				return false, err
			}
			all := true
			for k := range now {
				done := 0
				for _, ann := range now[k] {
					if h := ann[stamp.HashAnnotation]; h != old && h != "" {
						done++
					}
				}
				if done == count[k] && last[k] == 0 {
					last[k] = time.Since(start)
				}
				all = all && done == count[k]
			}
			return all, nil
		}); err != nil {
			return nil, err
		}
		took := time.Since(start)
		reqs, err := afterChange(env, p, mark)
		if err != nil {
			return nil, err
		}
		limit := rateLimits[run]
		var each []string
		for k := range kinds {
			each = append(each, fmt.Sprintf("%s %s", kinds[k], last[k].Round(10*time.Millisecond)))
		}
		rows = append(rows,
			row{fmt.Sprintf("fan-out, mix of kinds: %d workloads (%d Deployments, %d StatefulSets, %d DaemonSets) re-stamped, %s", n, count[0], count[1], count[2], limit),
				fmt.Sprintf("%s (last of each kind: %s)", took.Round(10*time.Millisecond), strings.Join(each, ", "))},
			row{fmt.Sprintf("requests configstamp sent for that change (%d dependents of 3 kinds)", n), formatRequests(reqs)},
		)
	}
	return rows, nil
}
