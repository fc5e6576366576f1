package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/configstamp/configstamp/test/bench"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

// rollingPace is one configstamp setting the rolling fan-out is measured at.
type rollingPace struct {
	name string
	args []string
}

// rollingPaces: the default pace, and the flags docs/operating.md recommends for large clusters.
var rollingPaces = []rollingPace{
	{"default pace (`--concurrency 4`, 20 qps)", nil},
	{"large-cluster flags (" + "`" + "--concurrency 32 --kube-api-qps 200 --kube-api-burst 400" + "`)",
		[]string{"--concurrency", "32", "--kube-api-qps", "200", "--kube-api-burst", "400"}},
}

// fanoutRolling: one ConfigMap consumed by n Deployments with one replica each, on a
// control plane that really rolls them (kube-controller-manager, kube-scheduler, kwok):
// every nudge makes a ReplicaSet and a pod while the rest are still being nudged. The
// clock starts when the edit returns; it stops when a watch has delivered a new
// generation of every Deployment (the rollout started), and again when every
// Deployment has finished rolling out. --debounce 0, so the figure is the fan-out. Then,
// with -reloader, the same for Reloader alone (configstamp stopped, its registration
// deleted), on the same Deployments.
func fanoutRolling(ctx context.Context, env *framework.Env, cfg config) ([]row, error) {
	var reloaderBin string
	if reloaderVersion != "" {
		var err error
		if reloaderBin, err = buildReloader(ctx); err != nil {
			return nil, err
		}
	}
	cs := clients(env)
	const ns = "rolling"
	if err := namespace(ctx, cs, ns); err != nil {
		return nil, err
	}
	if err := createConfigMaps(ctx, cs, ns, 1, 1<<10); err != nil {
		return nil, err
	}
	n := cfg.rolling
	paces := rollingPaces
	if cfg.rollingPaces != "" {
		paces = nil
		for _, args := range strings.Split(cfg.rollingPaces, ";") {
			paces = append(paces, rollingPace{"`" + strings.TrimSpace(args) + "`", strings.Fields(args)})
		}
	}
	var rows []row
	for run, pace := range paces {
		args := append([]string{"--debounce", "0s", "--zap-log-level", "info"}, pace.args...)
		if profileDir != "" {
			args = append(args, "--pprof-bind-address", "127.0.0.1:6060")
		}
		p, err := env.Run(ctx, framework.Options{Args: args, RemoveRegistration: true})
		if err != nil {
			return nil, err
		}
		if run == 0 {
			if err := parallel(n, 16, func(i int) error {
				d := peerDeployment(fmt.Sprintf("d-%05d", i), "cm-00000")
				d.Spec.Replicas = ptr.To[int32](1)
				_, err := cs.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
				return err
			}); err != nil {
				return nil, err
			}
		}
		m, err := rollingChange(ctx, env, ns, n, run, cluster.ConfigstampUser)
		p.Stop()
		if err != nil {
			return nil, err
		}
		rows = append(rows, m.rows(n, pace.name)...)
	}
	if reloaderBin == "" {
		return rows, nil
	}
	if err := noRegistration(ctx, cs); err != nil {
		return nil, err
	}
	r, err := startReloader(ctx, env, reloaderBin)
	if err != nil {
		return nil, err
	}
	m, err := rollingChange(ctx, env, ns, n, len(paces), reloaderUser)
	r.stop()
	if err != nil {
		return nil, err
	}
	return append(rows, m.rows(n, fmt.Sprintf("Reloader %s, `%s`, its defaults", reloaderVersion, reloaderAuto))...), nil
}

// rollingResult is one change's rolling fan-out.
type rollingResult struct {
	newGeneration, rolledOut time.Duration
	requests                 map[string]int
}

func (m rollingResult) rows(n int, name string) []row {
	return []row{
		{fmt.Sprintf("rolling fan-out: %d Deployments (1 pod each) given a new generation, %s", n, name), m.newGeneration.Round(10 * time.Millisecond).String()},
		{fmt.Sprintf("rolling fan-out: same, every Deployment rolled out (%s)", name), m.rolledOut.Round(100 * time.Millisecond).String()},
		{fmt.Sprintf("requests sent for that change (%s)", name), formatRequests(m.requests)},
	}
}

// rollingChange waits until the n Deployments of ns have rolled out and the control
// plane is idle, changes the ConfigMap cm-00000 (for run), and measures until every
// Deployment has a new generation and until every one has rolled out; it counts the
// requests user sent meanwhile (from the audit log).
func rollingChange(ctx context.Context, env *framework.Env, ns string, n, run int, user string) (rollingResult, error) {
	cs := clients(env)
	if err := waitFor(10*time.Minute, "every Deployment rolled out before the change", func() (bool, error) {
		return allRolledOut(ctx, cs, ns, n)
	}); err != nil {
		return rollingResult{}, err
	}
	time.Sleep(5 * time.Second) // start-up checks done, the control plane idle
	list, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return rollingResult{}, err
	}
	gens := map[string]int64{}
	for _, d := range list.Items {
		gens[d.Name] = d.Generation
	}
	w, err := cs.AppsV1().Deployments(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		return rollingResult{}, err
	}
	var profiled sync.WaitGroup
	if profileDir != "" && user == cluster.ConfigstampUser {
		profiled.Add(1)
		go func() {
			defer profiled.Done()
			profileFor(ctx, env, 15*time.Second, fmt.Sprintf("rolling-%d", run))
		}()
		time.Sleep(500 * time.Millisecond) // the profiles have begun
	}
	mark := markAudit(env.Cluster.AuditLog)
	if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, "cm-00000", types.MergePatchType,
		[]byte(fmt.Sprintf(`{"data":{"run":"%d"}}`, run)), metav1.PatchOptions{}); err != nil {
		w.Stop()
		return rollingResult{}, err
	}
	start := time.Now()
	var m rollingResult
	m.newGeneration, err = untilNewGenerations(w, gens, 10*time.Minute)
	w.Stop()
	if err != nil {
		return rollingResult{}, err
	}
	if err := waitFor(10*time.Minute, "every Deployment rolled out after the change", func() (bool, error) {
		return allRolledOut(ctx, cs, ns, n)
	}); err != nil {
		return rollingResult{}, err
	}
	m.rolledOut = time.Since(start)
	profiled.Wait()
	time.Sleep(3 * time.Second)
	m.requests, err = bench.Requests(env.Cluster.AuditLog, mark, user)
	return m, err
}

// untilNewGenerations reads the watch until every Deployment in gens has a higher
// generation, and returns the time that took.
func untilNewGenerations(w watch.Interface, gens map[string]int64, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	left := len(gens)
	done := map[string]bool{}
	deadline := time.After(timeout)
	for left > 0 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return 0, fmt.Errorf("watch closed with %d Deployments left", left)
			}
			d, isDep := ev.Object.(*appsv1.Deployment)
			if !isDep || done[d.Name] {
				continue
			}
			if before, known := gens[d.Name]; known && d.Generation > before {
				done[d.Name] = true
				left--
			}
		case <-deadline:
			return 0, fmt.Errorf("%d of %d Deployments without a new generation after %s", left, len(gens), timeout)
		}
	}
	return time.Since(start), nil
}

// allRolledOut reports whether n Deployments exist and each has rolled out its latest
// generation (every replica updated and available, no old one left).
func allRolledOut(ctx context.Context, cs kubernetes.Interface, ns string, n int) (bool, error) {
	list, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err
	}
	if len(list.Items) != n {
		return false, nil
	}
	for _, d := range list.Items {
		want := ptr.Deref(d.Spec.Replicas, 1)
		st := d.Status
		if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != want || st.AvailableReplicas != want || st.Replicas != want {
			return false, nil
		}
	}
	return true, nil
}

// profileFor takes CPU profiles of configstamp and kube-apiserver at once, for d, into
// profileDir with the given prefix.
func profileFor(ctx context.Context, env *framework.Env, d time.Duration, prefix string) {
	if err := os.MkdirAll(profileDir, 0o755); err != nil {
		return
	}
	takeProfiles(ctx, env, d, filepath.Join(profileDir, prefix+"-configstamp.pprof"), filepath.Join(profileDir, prefix+"-kube-apiserver.pprof"))
}
