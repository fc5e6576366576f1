// Command soak runs configstamp for a long while against a real local control plane
// (etcd and kube-apiserver from test/cluster): 10,000 ConfigMaps and as many Deployments
// (replicas 0), half created before configstamp starts (adopted) and half after
// (stamped on creation), then random ConfigMap edits at a fixed rate, each to a
// ConfigMap left alone long enough that it is one expected rollout. It samples
// configstamp's RSS, Go heap, goroutines and open files (slope per hour: a suspected
// leak), and at the end checks exactly-once: every stamp is the hash of its ConfigMap's
// content, and configstamp nudged each Deployment exactly once between one edit of its
// ConfigMap and the next (from the API server's audit log, which logs configstamp's
// PATCHes with their bodies). See RELIABILITY.md ("Soak").
//
//	make soak                    (SOAK_FLAGS="-quick" for a 2-minute run with 500 objects)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/configstamp/configstamp/test/bench"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/watcher"
)

type config struct {
	deployments int           // and as many ConfigMaps
	namespaces  int           // the objects are spread over
	duration    time.Duration // of the edits
	rate        float64       // edits per second
	cooldown    time.Duration // least time between two edits of one ConfigMap
	warmup      time.Duration // first part of the edits left out of the slopes
	every       time.Duration // between two samples
	settle      time.Duration // quiet time after the edits before the final check
	tolerance   float64       // percent of the mean per hour: a steeper slope is a suspected leak
}

// minCooldown is the least gap between two edits of one ConfigMap for each to be one
// rollout: configstamp's debounce, then its least time between two rollouts of one
// workload (both at their defaults, as the soak runs it), and a margin.
const minCooldown = watcher.DefaultDebounce + watcher.DefaultMinRolloutInterval + 5*time.Second

func main() {
	cfg := config{namespaces: 4, every: 10 * time.Second}
	flag.IntVar(&cfg.deployments, "deployments", 10000, "Deployments, and as many ConfigMaps (one each)")
	flag.DurationVar(&cfg.duration, "duration", 20*time.Minute, "how long to edit")
	flag.Float64Var(&cfg.rate, "rate", 5, "ConfigMap edits per second")
	flag.DurationVar(&cfg.cooldown, "cooldown", 30*time.Second, fmt.Sprintf("least time between two edits of one ConfigMap (at least %s: debounce, least rollout interval, margin)", minCooldown))
	flag.DurationVar(&cfg.warmup, "warmup", 2*time.Minute, "first part of the edits left out of the slopes")
	flag.DurationVar(&cfg.settle, "settle", 30*time.Second, "quiet time after every Deployment is current, before the final check (a late second nudge shows in it)")
	flag.Float64Var(&cfg.tolerance, "leak-tolerance", 10, "a slope above this percentage of the mean per hour is reported as a suspected leak")
	quick := flag.Bool("quick", false, "a smoke run: 500 objects, 2 minutes of edits, 30 s warm-up")
	out := flag.String("out", "", "also write the summary to this file")
	binary := flag.String("binary", "", "soak this configstamp binary instead of one built from the working tree")
	flag.Parse()
	if *quick {
		cfg.deployments, cfg.duration, cfg.warmup = 500, 2*time.Minute, 30*time.Second
	}
	if cfg.cooldown < minCooldown {
		fail(fmt.Errorf("-cooldown %s: want at least %s, or one edit's rollout may absorb the next", cfg.cooldown, minCooldown))
	}
	if cfg.deployments < 2 || cfg.rate <= 0 || cfg.warmup >= cfg.duration {
		fail(fmt.Errorf("want -deployments >= 2, -rate > 0 and -warmup shorter than -duration"))
	}
	log.SetLogger(logr.Discard())
	ctx := context.Background()
	env, err := framework.Setup(ctx, cluster.Options{})
	if err != nil {
		fail(err)
	}
	defer env.Teardown()
	go func() {
		// Interrupted: the control plane and its state go too.
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
		<-stop
		env.Teardown()
		fail(errors.New("interrupted"))
	}()
	if *binary != "" {
		env.Binary = *binary
	}
	res, err := soak(ctx, env, cfg)
	if err != nil {
		env.Teardown()
		fail(err)
	}
	summary := res.summary(cfg)
	fmt.Println()
	fmt.Print(summary)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(summary), 0o644); err != nil {
			env.Teardown()
			fail(err)
		}
	}
	if res.failed() {
		env.Teardown()
		fmt.Fprintln(os.Stderr, "soak: failed (exactly-once violated, the run proved nothing, or configstamp panicked or restarted); see above")
		os.Exit(1)
	}
}

// soak runs the whole soak on env and returns its results.
func soak(ctx context.Context, env *framework.Env, cfg config) (*results, error) {
	cs := bench.Clients(env)
	objs := objects(cfg)
	res := &results{objects: objs}
	half := len(objs) / 2
	fmt.Printf("== creating %d ConfigMaps and Deployments before configstamp starts\n", half)
	if err := populate(ctx, cs, cfg, objs[:half]); err != nil {
		return nil, err
	}
	from := bench.MarkAudit(env.Cluster.AuditLog)
	port, err := cluster.FreePort()
	if err != nil {
		return nil, err
	}
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := env.Run(ctx, framework.Options{Args: []string{"--metrics-bind-address", metricsAddr, "--zap-log-level", "info"}})
	if err != nil {
		return nil, err
	}
	defer p.Stop()
	res.pid = p.PID()
	fmt.Printf("== configstamp started (pid %d); waiting for its record of every adopted Deployment\n", res.pid)
	if res.adoption, err = waitAdopted(ctx, cs, objs[:half], 20*time.Minute); err != nil {
		return nil, err
	}
	fmt.Printf("== creating %d ConfigMaps and Deployments with configstamp running\n", len(objs)-half)
	if err := populate(ctx, cs, cfg, objs[half:]); err != nil {
		return nil, err
	}
	if res.idle, err = waitIdle(metricsAddr, 15*time.Minute); err != nil {
		return nil, err
	}
	fmt.Printf("== configstamp idle after %s; editing for %s at %.1f/s\n", res.idle.Round(time.Second), cfg.duration, cfg.rate)
	editsFrom := bench.MarkAudit(env.Cluster.AuditLog)
	s := newSampler(p, metricsAddr)
	sampling, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() { s.run(sampling, cfg.every); close(sampled) }()
	ed := newEditor(cs, objs, cfg.cooldown)
	res.editing = ed.run(ctx, cfg.rate, cfg.duration)
	stopSampling()
	<-sampled
	res.samples = s.samples
	res.edits = ed.tally()
	fmt.Printf("== %d edits made; waiting for every Deployment to be current\n", res.editing.made)
	if res.current, err = settle(ctx, cs, objs, cfg.settle); err != nil {
		return nil, err
	}
	if res.requests, err = requestsSince(env.Cluster.AuditLog, editsFrom); err != nil {
		return nil, err
	}
	if res.check, err = check(ctx, cs, env.Cluster.AuditLog, from, editsFrom, objs, res.edits); err != nil {
		return nil, err
	}
	// Read after the audit log: a nudge is logged before configstamp counts it, so one
	// made after the read shows as a difference too (there should be none by now).
	res.nudgesTotal, res.nudgesTotalErr = bench.Metric(metricsAddr, "configstamp_nudges_total")
	res.alive = p.Alive()
	res.panics = panics(p.Output())
	res.starts = starts(p.Logs())
	return res, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "soak:", err)
	os.Exit(1)
}
