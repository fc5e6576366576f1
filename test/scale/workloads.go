package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/bench"
	"github.com/configstamp/configstamp/test/framework"
	cswatcher "github.com/configstamp/configstamp/watcher"
	"github.com/configstamp/configstamp/webhook"
)

// memoryWorkloads: RSS of configstamp's two roles, each its own process as the chart
// runs them (one webhook process, one leader-elected watcher process), with n
// Deployments as Helm charts write them (helmDeployment), each consuming its own small
// ConfigMap, at rest: the highest of five samples 150 s after the watcher has checked
// every create and has nothing left (settled; the method of memory): what the watcher's
// cache of workloads costs as their number grows, and that the webhook caches none
// (BENCHMARKS.md, "Memory in the number of workloads"); and the watcher's highest RSS
// while it checked the creates, and its CPU time.
// With -profile, a heap profile of each process is taken after the samples.
// watcherArgs (-watcher-args) are appended to the watcher's flags in memoryWorkloads.
var watcherArgs []string

func memoryWorkloads(ctx context.Context, env *framework.Env, n int) ([]row, error) {
	cs := clients(env)
	const ns, leaseNS = "workloads", "workloads-lease"
	if err := namespace(ctx, cs, ns); err != nil {
		return nil, err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNS}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	hookArgs, hookMetrics := metricsArgs()
	hookPprof := pprofArgs(&hookArgs)
	hook, err := env.Run(ctx, framework.Options{Args: append(hookArgs, "--role", "webhook")})
	if err != nil {
		return nil, err
	}
	defer hook.Stop()
	watchArgs, watchMetrics := metricsArgs()
	watchPprof := pprofArgs(&watchArgs)
	watchArgs = append(watchArgs, watcherArgs...)
	watcher, err := env.Run(ctx, framework.Options{NoWebhook: true, Args: append(watchArgs, "--role", "watcher", "--leader-elect",
		"--leader-election-namespace", leaseNS, "--registration-name", webhook.DevConfigurationName)})
	if err != nil {
		return nil, err
	}
	defer watcher.Stop()
	if err := waitFor(2*time.Minute, "the watcher leads", func() (bool, error) {
		return strings.Contains(watcher.Output(), `"msg":"Successfully acquired lease"`), nil
	}); err != nil {
		return nil, err
	}
	// The first periodic re-check pass comes one --recheck-interval (10 min by default,
	// jittered by up to 20%) after the watcher leads: the samples at rest wait past it,
	// so the whole run's highest RSS includes one pass over every workload.
	firstPassBy := time.Now().Add(cswatcher.DefaultRecheckInterval*6/5 + time.Minute)
	// The watcher's highest RSS from the first write until it has settled (every create
	// checked), sampled every 5 s: the peak its container must fit, not only the rest;
	// and over the whole run, to the samples at rest.
	busyPeak := peakRSS(watcher.PID(), 5*time.Second)
	wholePeak := peakRSS(watcher.PID(), 5*time.Second)
	hookPeak := peakRSS(hook.PID(), 5*time.Second) // the webhook's, through the creates' admissions
	start := time.Now()
	if err := parallel(n, 16, func(i int) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", i), Labels: helmLabels(i)},
			Data: map[string]string{"app.yaml": "level: info\nreplicas: 3\n", "LOG_LEVEL": "info", "FEATURE_X": "on"}}
		_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	if err := parallel(n, 16, func(i int) error {
		_, err := cs.AppsV1().Deployments(ns).Create(ctx, helmDeployment(i, fmt.Sprintf("cm-%05d", i)), metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	fmt.Printf("  created %d ConfigMaps and %d Deployments in %s\n", n, n, time.Since(start).Round(time.Second))
	d, err := cs.AppsV1().Deployments(ns).Get(ctx, fmt.Sprintf("d-%05d", n-1), metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if got := d.Spec.Template.Annotations[stamp.SourcesAnnotation]; !strings.HasPrefix(got, "configmap/") {
		return nil, fmt.Errorf("deployment %s: sources annotation %q, want configmap/...", d.Name, got)
	}
	fmt.Printf("  each Deployment %d bytes as JSON\n", jsonSize(d))
	took, err := settled(watchMetrics, n, 2*time.Hour) // 50,000 checks at about 15 a second: about an hour
	busy, hookBusy := busyPeak(), hookPeak()
	if err != nil {
		return nil, err
	}
	fmt.Printf("  the watcher checked every create and had nothing left %s after the last write\n", took.Round(time.Second))
	time.Sleep(max(150*time.Second, time.Until(firstPassBy)))
	procs := []struct {
		role, metrics, pprof string
		p                    *framework.Configstamp
	}{{"watcher", watchMetrics, watchPprof, watcher}, {"webhook", hookMetrics, hookPprof, hook}}
	// The highest of 5 samples, with what of it was anonymous (heap, stacks, runtime) and
	// file-backed (the binary's mapped code and data), read with it: before the heap
	// profile below, whose ?gc=1 collects.
	peaks, anons, files := make([]int64, len(procs)), make([]int64, len(procs)), make([]int64, len(procs))
	for range 5 {
		for i, pr := range procs {
			v, err := bench.Statuses(pr.p.PID(), "VmRSS", "RssAnon", "RssFile")
			if err != nil {
				return nil, err
			}
			if v[0] > peaks[i] {
				peaks[i], anons[i], files[i] = v[0], v[1], v[2]
			}
		}
		time.Sleep(time.Second)
	}
	whole := wholePeak()
	// Its CPU time so far (the lists, the checks, the rest): what a collector setting costs.
	cpu, err := metric(watchMetrics, "process_cpu_seconds_total")
	if err != nil {
		return nil, err
	}
	// What the periodic re-check did by then (a pass over a quiet cluster queues nothing).
	for _, name := range []string{"configstamp_checks_total", "configstamp_recheck_queued_total", "configstamp_recheck_found_total"} {
		v, err := bench.MetricSum(watchMetrics, name)
		fmt.Printf("  watcher %s: %v (%v)\n", name, v, err)
	}
	rows := []row{
		{fmt.Sprintf("highest RSS sampled every 5 s from the first write until it settled, %d Helm-style Deployments and %d ConfigMaps, the watcher process", n, n), mib(busy)},
		{"highest RSS sampled every 5 s over the same time, the webhook process", mib(hookBusy)},
		{"highest RSS of the watcher process sampled every 5 s from the first write to the samples at rest, through its first periodic re-check pass (default --recheck-interval)", mib(whole)},
		{"CPU time of the watcher process from its start to the samples at rest", fmt.Sprintf("%.1f s", cpu)},
	}
	for i, pr := range procs {
		if !pr.p.Alive() {
			return nil, fmt.Errorf("the %s process exited:\n%s", pr.role, pr.p.Output())
		}
		heap, err := metric(pr.metrics, "go_memstats_heap_inuse_bytes")
		if err != nil {
			return nil, err
		}
		if pr.pprof != "" {
			heapProfile(ctx, pr.pprof, filepath.Join(profileDir, pr.role+"-heap.pprof"))
		}
		rows = append(rows, row{fmt.Sprintf("RSS at rest, %d Helm-style Deployments and %d ConfigMaps, the %s process", n, n, pr.role),
			fmt.Sprintf("%s (Go heap in use %s; anonymous %s, file %s)", mib(peaks[i]), mib(int64(heap)), mib(anons[i]), mib(files[i]))})
		rows = append(rows, row{fmt.Sprintf("the %s process's runtime at rest", pr.role), runtimeBreakdown(pr.metrics)})
	}
	return rows, nil
}

// peakRSS samples the RSS of the process pid every period until the returned function
// is called, which returns the highest sample.
func peakRSS(pid int, period time.Duration) func() int64 {
	done, result := make(chan struct{}), make(chan int64, 1)
	go func() {
		var peak int64
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			if r, err := rss(pid); err == nil {
				peak = max(peak, r)
			}
			select {
			case <-done:
				result <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return func() int64 { close(done); return <-result }
}

// settled waits until the watcher serving metrics at addr has made at least n checks and
// has nothing left: none queued (counted events, debounced ones included: queue
// namespaces; ready items: workqueue depth), none running, no source debouncing; twice,
// 5 s apart (more than the debounce). RSS at rest is then a watcher's with nothing to
// do, not one working through the creates: each check of a stamped create reads its
// ConfigMap, at --kube-api-qps (20 a second by default: over 8 minutes for 10,000).
func settled(addr string, n int, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	idle := 0
	for {
		checked, err := bench.MetricSum(addr, "configstamp_checks_total")
		busy := 0.0
		for _, m := range []string{"workqueue_depth", "workqueue_unfinished_work_seconds", "configstamp_queue_namespaces", "configstamp_debounce_pending"} {
			v, e := bench.MetricSum(addr, m)
			if e != nil && strings.HasSuffix(e.Error(), "not found") {
				e = nil // no sample yet: none
			}
			busy, err = busy+v, cmp.Or(err, e)
		}
		if err == nil && checked >= float64(n) && busy == 0 {
			idle++
		} else {
			idle = 0
		}
		if idle == 2 {
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return 0, fmt.Errorf("the watcher still busy %s after the last write (%.0f checks of %d, %.0f queued or running; %v)", timeout, checked, n, busy, err)
		}
		time.Sleep(5 * time.Second)
	}
}

// helmLabels are ten labels of about 100 bytes each, as Helm charts set them.
func helmLabels(i int) map[string]string {
	l := map[string]string{}
	for _, k := range []string{"name", "instance", "version", "component", "part-of", "managed-by", "created-by", "tier", "team", "cost-center"} {
		l["app.kubernetes.io/"+k] = fmt.Sprintf("%s-%05d-%s", k, i, strings.Repeat("x", 63))[:63]
	}
	return l
}

// helmAnnotations are ten annotations of about 100 bytes each.
func helmAnnotations(i int) map[string]string {
	a := map[string]string{}
	for j := range 10 {
		a[fmt.Sprintf("example.com/annotation-%d", j)] = fmt.Sprintf("%05d-%s", i, strings.Repeat("a", 70))
	}
	return a
}

// helmDeployment is Deployment i as a Helm chart writes it: Helm labels and annotations
// on it and its pod template, three containers of 30 env variables each (every fifth
// selecting a key of cm), envFrom cm, probes and resources, and eight volumes (cm,
// projected cm, a service account token, emptyDirs, downward API); replicas 0.
func helmDeployment(i int, cm string) *appsv1.Deployment {
	name := fmt.Sprintf("d-%05d", i)
	sel := map[string]string{"app.kubernetes.io/name": helmLabels(i)["app.kubernetes.io/name"], "app.kubernetes.io/instance": helmLabels(i)["app.kubernetes.io/instance"]}
	var t corev1.PodTemplateSpec
	t.Labels, t.Annotations = helmLabels(i), helmAnnotations(i)
	ref := corev1.LocalObjectReference{Name: cm}
	for c := range 3 {
		ct := corev1.Container{
			Name: fmt.Sprintf("c%d", c), Image: "registry.example.com/team/app:1.2.3", Args: []string{"--config", "/etc/app/app.yaml"},
			Ports: []corev1.ContainerPort{{Name: fmt.Sprintf("http%d", c), ContainerPort: int32(8080 + c)}},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(int32(8080 + c))}}},
			LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(int32(8080 + c))}}},
			EnvFrom:        []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref}}},
			VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}, {Name: "tmp", MountPath: "/tmp"}},
		}
		for j := range 30 {
			e := corev1.EnvVar{Name: fmt.Sprintf("APP_SETTING_%02d", j), Value: fmt.Sprintf("value-%02d-%s", j, strings.Repeat("v", 24))}
			if j%5 == 0 {
				e.Value, e.ValueFrom = "", &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: ref, Key: "LOG_LEVEL"}}
			}
			ct.Env = append(ct.Env, e)
		}
		t.Spec.Containers = append(t.Spec.Containers, ct)
	}
	t.Spec.Volumes = []corev1.Volume{
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref}}},
		{Name: "config-projected", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: ref, Items: []corev1.KeyToPath{{Key: "app.yaml", Path: "app.yaml"}}}}}}}},
		{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3600)}}}}}},
		{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}}},
	}
	for _, v := range []string{"tmp", "cache", "data", "run"} {
		t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: v, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: helmLabels(i), Annotations: helmAnnotations(i)},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: sel}, Template: t},
	}
}

// jsonSize is the size of v as JSON.
func jsonSize(v any) int {
	b, _ := json.Marshal(v)
	return len(b)
}

// runtimeBreakdown is where the Go runtime says a process's memory is, from its metrics:
// the heap in use and what it holds from the OS idle, stacks, the runtime's own.
func runtimeBreakdown(addr string) string {
	var parts []string
	for _, m := range []struct{ name, label string }{
		{"go_memstats_heap_alloc_bytes", "heap allocated"},
		{"go_memstats_heap_idle_bytes", "heap idle"},
		{"go_memstats_heap_released_bytes", "of it released"},
		{"go_memstats_stack_inuse_bytes", "stacks"},
		{"go_memstats_mspan_inuse_bytes", "spans"},
		{"go_memstats_gc_sys_bytes", "GC metadata"},
		{"go_memstats_other_sys_bytes", "other runtime"},
		{"go_memstats_next_gc_bytes", "next GC at"},
	} {
		if v, err := metric(addr, m.name); err == nil {
			parts = append(parts, m.label+" "+mib(int64(v)))
		}
	}
	if v, err := metric(addr, "go_goroutines"); err == nil {
		parts = append(parts, fmt.Sprintf("%.0f goroutines", v))
	}
	return strings.Join(parts, ", ")
}
