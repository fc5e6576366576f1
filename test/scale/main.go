// Command scale measures configstamp against a real local control plane (etcd and
// kube-apiserver from test/cluster) and prints one table: memory with large ConfigMaps
// and with large Secrets (created plainly and as client-side `kubectl apply` writes
// them), admission overhead through the API server, change-to-stamp latency, fan-out
// (to Deployments, and to a mix of Deployments, StatefulSets and DaemonSets), API
// requests per change, cold start and restart cost, and beside Stakater Reloader:
// change to new generation and a fan-out with real rollouts. See BENCHMARKS.md for the
// method.
//
//	make bench-scale            (SCALE_FLAGS="-quick" for a smaller run)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

type config struct {
	configMaps  int // for memory
	deployments int // for memory, fan-out, restart
	coldStart   int // Deployments present at cold start
	edits       int // change-to-stamp samples
	writers     int // concurrent writers for admission overhead
	updates     int // updates per writer
	peerEdits   int // change-to-generation samples of each tool, configstamp and Reloader
	rolling     int // Deployments (one pod each) in the rolling fan-out
	// rollingPaces replaces the paces the rolling fan-out is measured at:
	// semicolon-separated lists of configstamp flags.
	rollingPaces string
}

func main() {
	quick := flag.Bool("quick", false, "a smaller run (100 objects instead of 1,000; 500 instead of 5,000)")
	only := flag.String("only", "", "comma-separated subset: "+strings.Join(sections, ","))
	out := flag.String("out", "", "also write the table to this file")
	flag.StringVar(&profileDir, "profile", "", "write CPU profiles of configstamp and kube-apiserver taken during the admission measurement and the rolling fan-out, and heap profiles of the webhook and watcher processes in memory-workloads, into this directory")
	flag.IntVar(&rollingN, "rolling", 0, "Deployments in the rolling fan-out (default 200, 50 with -quick)")
	paces := flag.String("rolling-paces", "", "measure the rolling fan-out at these paces instead: semicolon-separated lists of configstamp flags (e.g. \"--concurrency 8;--concurrency 16\")")
	writers := flag.Int("writers", 0, "concurrent writers for the admission overhead (default 20)")
	writes := flag.String("writes", writePlain+","+writeClientSideApply, "comma-separated ways the memory measurement writes its objects: "+writePlain+" (create), "+writeClientSideApply+" (as client-side kubectl apply: last-applied annotation, managedFields naming every key)")
	flag.StringVar(&reloaderVersion, "reloader", "v1.4.22", "the Stakater Reloader release latency-reloader and fanout-rolling measure beside configstamp, built from the Go module proxy (\"\": configstamp alone)")
	workloads := flag.Int("workloads", 0, "Deployments (and ConfigMaps) in memory-workloads (default 10,000; 1,000 with -quick)")
	flag.Func("watcher-args", "space-separated configstamp flags appended to the watcher's in memory-workloads (e.g. \"--kube-api-qps 100\" to check 50,000 creates sooner)", func(v string) error {
		watcherArgs = strings.Fields(v)
		return nil
	})
	binary := flag.String("binary", "", "measure this configstamp binary instead of one built from the working tree as the image builds it (e.g. an earlier commit's, for a before/after figure)")
	flag.Parse()
	log.SetLogger(logr.Discard())
	cfg := config{configMaps: 1000, deployments: 1000, coldStart: 5000, edits: 50, writers: 20, updates: 50, peerEdits: 30, rolling: 200}
	if *quick {
		cfg = config{configMaps: 100, deployments: 100, coldStart: 500, edits: 20, writers: 20, updates: 10, peerEdits: 5, rolling: 50}
	}
	if rollingN > 0 {
		cfg.rolling = rollingN
	}
	cfg.rollingPaces = *paces
	if *writers > 0 {
		cfg.writers = *writers
	}
	selected := map[string]bool{}
	for _, name := range strings.Split(*only, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if !slices.Contains(sections, name) {
			fail(fmt.Errorf("-only: unknown %q (want some of %s)", name, strings.Join(sections, ",")))
		}
		selected[name] = true
	}
	want := func(name string) bool { return len(selected) == 0 || selected[name] }
	for _, write := range strings.Split(*writes, ",") {
		if write != writePlain && write != writeClientSideApply {
			fail(fmt.Errorf("-writes: unknown %q", write))
		}
	}
	ctx := context.Background()
	if *binary == "" {
		b, err := imageBuild(ctx)
		if err != nil {
			fail(err)
		}
		defer os.RemoveAll(filepath.Dir(b))
		*binary = b
	}
	var rows []row
	report := func(r ...row) {
		for _, x := range r {
			fmt.Printf("  %-58s %s\n", x.name, x.value)
		}
		rows = append(rows, r...)
	}
	runOn := func(opts cluster.Options, name string, f func(*framework.Env) ([]row, error)) {
		fmt.Printf("== %s\n", name)
		opts.Log = func(string, ...any) {}
		env, err := framework.Setup(ctx, opts)
		if err != nil {
			fail(err)
		}
		defer env.Teardown()
		if *binary != "" {
			env.Binary = *binary
		}
		r, err := f(env)
		if err != nil {
			fail(fmt.Errorf("%s: %w", name, err))
		}
		report(r...)
	}
	run := func(name string, f func(*framework.Env) ([]row, error)) { runOn(cluster.Options{}, name, f) }
	// memory measures ConfigMaps; memory-secrets the same with Secrets (configstamp
	// running with --secrets).
	var memorySources []string
	if want("memory") {
		memorySources = append(memorySources, stamp.KindConfigMap)
	}
	if want("memory-secrets") {
		memorySources = append(memorySources, stamp.KindSecret)
	}
	for _, size := range []int{100 << 10, 1000 << 10} {
		if len(memorySources) == 0 {
			break
		}
		results := map[string]map[string]memoryResult{} // by source kind, then by write
		for _, source := range memorySources {
			results[source] = map[string]memoryResult{}
			for _, write := range strings.Split(*writes, ",") {
				run(fmt.Sprintf("memory, %d %s of %s, written %s", cfg.configMaps, sourceNames(source), sizeName(size), write), func(env *framework.Env) ([]row, error) {
					r, res, err := memory(ctx, env, cfg, source, size, write)
					results[source][write] = res
					return r, err
				})
			}
			plain, okPlain := results[source][writePlain]
			csa, okCSA := results[source][writeClientSideApply]
			if okPlain && okCSA {
				what := "RSS written"
				if source == stamp.KindSecret {
					what = "RSS of Secrets written"
				}
				report(row{fmt.Sprintf("%s %s vs %s, %s: at rest / after every change", what, writeClientSideApply, writePlain, sizeName(size)), compare(csa, plain)})
			}
		}
		for _, write := range strings.Split(*writes, ",") {
			sec, okSec := results[stamp.KindSecret][write]
			cm, okCM := results[stamp.KindConfigMap][write]
			if okSec && okCM {
				report(row{fmt.Sprintf("RSS Secrets vs ConfigMaps, written %s, %s: at rest / after every change", write, sizeName(size)), compare(sec, cm)})
			}
		}
	}
	if want("memory-workloads") {
		n := 10000
		if *quick {
			n = 1000
		}
		if *workloads > 0 {
			n = *workloads
		}
		run(fmt.Sprintf("memory, %d Helm-style Deployments", n), func(env *framework.Env) ([]row, error) { return memoryWorkloads(ctx, env, n) })
	}
	if want("admission") {
		run("admission overhead", func(env *framework.Env) ([]row, error) { return admission(ctx, env, cfg) })
	}
	if want("latency") {
		run("change to stamp", func(env *framework.Env) ([]row, error) { return latency(ctx, env, cfg) })
	}
	if want("latency-reloader") && reloaderVersion != "" {
		run("change to new generation, configstamp and Reloader", func(env *framework.Env) ([]row, error) { return latencyReloader(ctx, env, cfg) })
	}
	if want("fanout") {
		run("fan-out", func(env *framework.Env) ([]row, error) { return fanout(ctx, env, cfg) })
	}
	if want("fanout-kinds") {
		run("fan-out, mix of kinds", func(env *framework.Env) ([]row, error) { return fanoutKinds(ctx, env, cfg) })
	}
	if want("fanout-rolling") {
		// Real rollouts: kube-controller-manager, kube-scheduler and kwok.
		runOn(cluster.Options{Controllers: true}, "fan-out with real rollouts", func(env *framework.Env) ([]row, error) { return fanoutRolling(ctx, env, cfg) })
	}
	if want("restart") {
		run("restart", func(env *framework.Env) ([]row, error) { return restart(ctx, env, cfg) })
	}
	if want("coldstart") {
		run("cold start", func(env *framework.Env) ([]row, error) { return coldStart(ctx, env, cfg) })
	}
	table := "| measurement | result |\n|---|---|\n"
	for _, r := range rows {
		table += fmt.Sprintf("| %s | %s |\n", r.name, r.value)
	}
	fmt.Println()
	fmt.Print(table)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(table), 0o644); err != nil {
			fail(err)
		}
	}
}

// rollingN is -rolling.
var rollingN int

// sections are the names -only selects; each selects exactly its own measurement.
var sections = []string{"memory", "memory-secrets", "memory-workloads", "admission", "latency", "latency-reloader", "fanout", "fanout-kinds", "fanout-rolling", "restart", "coldstart"}

type row struct{ name, value string }

// compare says how much a run's memory figures are above (or below) another's.
func compare(a, b memoryResult) string {
	return fmt.Sprintf("%+.1f%% / %+.1f%% (Go heap in use %+.1f%% / %+.1f%%)", growth(a.atRest, b.atRest), growth(a.afterChange, b.afterChange),
		growth(a.heapRest, b.heapRest), growth(a.heapChange, b.heapChange))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "scale:", err)
	os.Exit(1)
}

func sizeName(size int) string {
	if size >= 1000<<10 {
		return "~1 MiB"
	}
	return fmt.Sprintf("%d KiB", size>>10)
}

// growth is how much larger a is than b, in percent.
func growth(a, b int64) float64 { return 100 * (float64(a) - float64(b)) / float64(b) }

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// imageBuild builds configstamp from the working tree as the image does (static,
// stripped, no VCS stamp: make image; only -X main.version differs), so the memory measured is the shipped binary's: a default
// build on a machine with a C compiler links libc dynamically, 2-4 MiB more resident
// (BENCHMARKS.md).
func imageBuild(ctx context.Context) (string, error) {
	dir, err := os.MkdirTemp("", "configstamp-scale-")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "configstamp")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w", "-o", out, "./cmd/configstamp")
	build.Dir = cluster.RepoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("build configstamp: %w", err)
	}
	return out, nil
}
