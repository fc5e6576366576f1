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
	"k8s.io/client-go/kubernetes"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/bench"
	"github.com/configstamp/configstamp/test/cluster"
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

// peerEditGap spaces the edits of latencyReloader: each is an isolated change, as most
// are, for either tool. configstamp defers a rollout of a workload it rolled less than
// --min-rollout-interval (10 s) before; Reloader's client has client-go's default rate
// limit (5 qps, burst 10, for each API group; no flag), and each change costs it a LIST
// of every workload kind besides the PATCH and an Event, so edits in quick succession
// would measure its rate limit instead.
const peerEditGap = 11 * time.Second

// latencyReloader: time from a ConfigMap edit (the API's response) to a new generation
// of the one Deployment consuming it (seen through a watch), over peerEdits edits
// peerEditGap apart, for configstamp at --debounce 0 and then, alone (configstamp
// stopped, its registration deleted), for Reloader in auto mode, on the same control
// plane.
func latencyReloader(ctx context.Context, env *framework.Env, cfg config) ([]row, error) {
	bin, err := buildReloader(ctx)
	if err != nil {
		return nil, err
	}
	cs := clients(env)
	const ns = "peers"
	if err := namespace(ctx, cs, ns); err != nil {
		return nil, err
	}
	if err := createConfigMaps(ctx, cs, ns, 1, 1<<10); err != nil {
		return nil, err
	}
	p, err := env.Run(ctx, framework.Options{Args: []string{"--debounce", "0s"}, RemoveRegistration: true})
	if err != nil {
		return nil, err
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, peerDeployment("app", "cm-00000"), metav1.CreateOptions{}); err != nil {
		p.Stop()
		return nil, err
	}
	mark := markAudit(env.Cluster.AuditLog)
	ours, err := generationLatencies(ctx, cs, ns, "app", cfg.peerEdits)
	p.Stop()
	if err != nil {
		return nil, err
	}
	ourReqs, err := bench.Requests(env.Cluster.AuditLog, mark, cluster.ConfigstampUser)
	if err != nil {
		return nil, err
	}
	ourPhases, err := phases(env.Cluster.AuditLog, mark, cluster.ConfigstampUser, ns)
	if err != nil {
		return nil, err
	}
	if err := noRegistration(ctx, cs); err != nil {
		return nil, err
	}
	r, err := startReloader(ctx, env, bin)
	if err != nil {
		return nil, err
	}
	mark = markAudit(env.Cluster.AuditLog)
	theirs, err := generationLatencies(ctx, cs, ns, "app", cfg.peerEdits)
	r.stop()
	if err != nil {
		return nil, err
	}
	theirReqs, err := bench.Requests(env.Cluster.AuditLog, mark, reloaderUser)
	if err != nil {
		return nil, err
	}
	theirPhases, err := phases(env.Cluster.AuditLog, mark, reloaderUser, ns)
	if err != nil {
		return nil, err
	}
	return []row{
		{fmt.Sprintf("change to new generation p50 / p95, configstamp --debounce 0 (%d edits)", cfg.peerEdits),
			fmt.Sprintf("%s / %s", ms(pct(ours, 50)), ms(pct(ours, 95)))},
		{fmt.Sprintf("change to new generation p50 / p95, Reloader %s, %s (%d edits)", reloaderVersion, reloaderAuto, cfg.peerEdits),
			fmt.Sprintf("%s / %s", ms(pct(theirs, 50)), ms(pct(theirs, 95)))},
		{"configstamp's changes, step by step", ourPhases},
		{"Reloader's changes, step by step", theirPhases},
		{"requests configstamp sent for those edits", formatRequests(ourReqs)},
		{"requests Reloader sent for those edits", formatRequests(theirReqs)},
	}, nil
}

// generationLatencies edits the ConfigMap cm-00000 n times, peerEditGap apart, and
// returns, sorted, how long after each edit's response a watch delivered a new
// generation of the Deployment ns/name.
func generationLatencies(ctx context.Context, cs kubernetes.Interface, ns, name string, n int) ([]time.Duration, error) {
	var lat []time.Duration
	for i := 0; i < n; i++ {
		time.Sleep(peerEditGap)
		cur, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		w, err := cs.AppsV1().Deployments(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: cur.ResourceVersion})
		if err != nil {
			return nil, err
		}
		if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, "cm-00000", types.MergePatchType,
			[]byte(fmt.Sprintf(`{"data":{"edit":"%d-%d"}}`, time.Now().UnixNano(), i)), metav1.PatchOptions{}); err != nil {
			w.Stop()
			return nil, err
		}
		took, err := untilNewGenerations(w, map[string]int64{name: cur.Generation}, 30*time.Second)
		w.Stop()
		if err != nil {
			return nil, fmt.Errorf("edit %d: %w", i, err)
		}
		lat = append(lat, took)
	}
	slices.Sort(lat)
	return lat, nil
}

// phases breaks a tool's changes down from the audit log after mark: for each edit of the
// ConfigMap ns/cm-00000 by someone else, the medians of the time from the edit's
// response to the tool's first request after it (the change reached the tool through
// its watch, and was queued), from there to the tool's PATCH of a Deployment (its reads
// before it), and the PATCH itself (with any webhook call in it).
func phases(path string, mark bench.AuditMark, user, ns string) (string, error) {
	type edit struct{ received, done time.Time }
	var edits []edit
	var firsts, patches []*bench.AuditEvent
	err := bench.ReadAudit(path, mark, func(ev *bench.AuditEvent) {
		if ev.Stage != "ResponseComplete" || ev.ObjectRef.Namespace != ns || ev.Verb == "watch" {
			return
		}
		switch {
		case ev.User.Username != user && ev.Verb == "patch" && ev.ObjectRef.Resource == "configmaps" && ev.ObjectRef.Name == "cm-00000":
			edits = append(edits, edit{ev.RequestReceivedTimestamp, ev.StageTimestamp})
		case ev.User.Username == user:
			firsts = append(firsts, ev)
			if ev.Verb == "patch" && ev.ObjectRef.Resource == "deployments" {
				patches = append(patches, ev)
			}
		}
	})
	if err != nil {
		return "", err
	}
	after := func(evs []*bench.AuditEvent, t time.Time) *bench.AuditEvent {
		var best *bench.AuditEvent
		for _, ev := range evs {
			if ev.RequestReceivedTimestamp.After(t) && (best == nil || ev.RequestReceivedTimestamp.Before(best.RequestReceivedTimestamp)) {
				best = ev
			}
		}
		return best
	}
	var toFirst, toPatch, patch []time.Duration
	for _, e := range edits {
		first, p := after(firsts, e.received), after(patches, e.received)
		if first == nil || p == nil {
			continue
		}
		toFirst = append(toFirst, first.RequestReceivedTimestamp.Sub(e.done))
		toPatch = append(toPatch, p.RequestReceivedTimestamp.Sub(first.RequestReceivedTimestamp))
		patch = append(patch, p.StageTimestamp.Sub(p.RequestReceivedTimestamp))
	}
	if len(patch) == 0 {
		return "no edit followed by a PATCH in the audit log", nil
	}
	for _, d := range [][]time.Duration{toFirst, toPatch, patch} {
		slices.Sort(d)
	}
	return fmt.Sprintf("edit to first request %s, first request to PATCH %s, PATCH %s (medians of %d, audit times)",
		ms(pct(toFirst, 50)), ms(pct(toPatch, 50)), ms(pct(patch, 50)), len(patch)), nil
}
