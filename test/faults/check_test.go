package faults

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/hashdoc"
)

// settle is how long the final state must still hold once every configstamp is idle
// (nothing debouncing, queued, running, or waiting out a retry or a deferred rollout):
// a late write would have been made by then.
const settle = 5 * time.Second

// wantHash is the config hash of the fleet's ConfigMap as its pods see it (a volume of
// all its keys), recomputed from the encoding in docs/hash.md, not by configstamp's code.
func (f *fleet) wantHash() (string, error) {
	var failed error
	h := hashdoc.Hash([]hashdoc.Source{{Name: configMapName}}, func(name string) *corev1.ConfigMap {
		var cm corev1.ConfigMap
		if err := env.Client.Get(bg, client.ObjectKey{Namespace: f.ns, Name: name}, &cm); err != nil {
			if !apierrors.IsNotFound(err) {
				failed = err
			}
			return nil
		}
		return &cm
	}, framework.HashKey, f.ns)
	return h, failed
}

// stamped reports whether every Deployment of the fleet carries want, and how many do.
func (f *fleet) stamped(want string) (int, error) {
	deps, err := f.deployments()
	if err != nil {
		return 0, err
	}
	n := 0
	var first error
	for _, d := range deps {
		if got := d.Spec.Template.Annotations[stamp.HashAnnotation]; got == want {
			n++
		} else if first == nil {
			first = fmt.Errorf("%s/%s: stamp %q, want %q", d.Namespace, d.Name, got, want)
		}
	}
	return n, first
}

// state checks the fleet once: each Deployment stamped with want ("": unstamped), exactly rollouts
// ReplicaSets and that revision, its rollout complete (every pod Running in its newest
// ReplicaSet with the stamp, none terminating), and no nudge marker left. It returns
// each Deployment's generation.
func (f *fleet) state(want string, rollouts int) (map[string]int64, error) {
	deps, err := f.deployments()
	if err != nil {
		return nil, err
	}
	var rsList appsv1.ReplicaSetList
	if err := env.Client.List(bg, &rsList, client.InNamespace(f.ns)); err != nil {
		return nil, err
	}
	var pods corev1.PodList
	if err := env.Client.List(bg, &pods, client.InNamespace(f.ns)); err != nil {
		return nil, err
	}
	owned := map[string][]appsv1.ReplicaSet{}
	for _, rs := range rsList.Items {
		if ref := metav1.GetControllerOf(&rs); ref != nil {
			owned[string(ref.UID)] = append(owned[string(ref.UID)], rs)
		}
	}
	running := map[string]int{} // by ReplicaSet name
	for _, p := range pods.Items {
		ref := metav1.GetControllerOf(&p)
		if ref == nil {
			continue
		}
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			return nil, fmt.Errorf("pod %s is %s (deleting: %v)", p.Name, p.Status.Phase, p.DeletionTimestamp != nil)
		}
		if p.Annotations[stamp.HashAnnotation] != want {
			return nil, fmt.Errorf("pod %s runs hash %q, want %q", p.Name, p.Annotations[stamp.HashAnnotation], want)
		}
		running[ref.Name]++
	}
	gens := map[string]int64{}
	for _, d := range deps {
		what := d.Namespace + "/" + d.Name
		if got := d.Spec.Template.Annotations[stamp.HashAnnotation]; got != want {
			return nil, fmt.Errorf("%s: stamp %q, want %q", what, got, want)
		}
		if _, marked := d.Annotations[stamp.NudgeAnnotation]; marked {
			return nil, fmt.Errorf("%s: nudge marker left", what)
		}
		sets := owned[string(d.UID)]
		if len(sets) != rollouts {
			return nil, fmt.Errorf("%s: %d ReplicaSets, want %d", what, len(sets), rollouts)
		}
		if rev := d.Annotations["deployment.kubernetes.io/revision"]; rev != strconv.Itoa(rollouts) {
			return nil, fmt.Errorf("%s: revision %s, want %d", what, rev, rollouts)
		}
		st, replicas := d.Status, *d.Spec.Replicas
		if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != replicas || st.AvailableReplicas != replicas || st.Replicas != replicas {
			return nil, fmt.Errorf("%s: generation %d observed %d, replicas %d updated %d available %d",
				what, d.Generation, st.ObservedGeneration, st.Replicas, st.UpdatedReplicas, st.AvailableReplicas)
		}
		for _, rs := range sets {
			newest := rs.Annotations["deployment.kubernetes.io/revision"] == strconv.Itoa(rollouts)
			if n := running[rs.Name]; newest && n != int(replicas) || !newest && n != 0 {
				return nil, fmt.Errorf("%s: %d pods of ReplicaSet %s (newest: %v)", what, n, rs.Name, newest)
			}
		}
		gens[what] = d.Generation
	}
	return gens, nil
}

// wants computes each fleet's expected hash.
func wants(t *testing.T, fleets []*fleet) map[*fleet]string {
	t.Helper()
	out := map[*fleet]string{}
	for _, f := range fleets {
		want, err := f.wantHash()
		if err != nil {
			t.Fatal(err)
		}
		out[f] = want
	}
	return out
}

// rolledOut waits until every Deployment of every fleet is stamped with its fleet's
// wanted hash ("": unstamped) and has rolled out exactly rollouts times; it returns a
// check that the state still holds with no write to any Deployment since (its
// generation moves with its spec and, for Deployments, its annotations).
func rolledOut(t *testing.T, fleets []*fleet, rollouts int, want map[*fleet]string) func() error {
	t.Helper()
	var gens map[string]int64
	all := func() error {
		seen := map[string]int64{}
		for _, f := range fleets {
			g, err := f.state(want[f], rollouts)
			if err != nil {
				return fmt.Errorf("%s: %w", f.mode, err)
			}
			for k, v := range g {
				seen[k] = v
			}
		}
		if gens == nil {
			gens = seen
			return nil
		}
		for k, g := range seen {
			if gens[k] != g {
				return fmt.Errorf("%s: generation %d -> %d after it had settled", k, gens[k], g)
			}
		}
		return nil
	}
	framework.Eventually(t, 3*time.Minute, fmt.Sprintf("every Deployment rolled out %d times", rollouts), all)
	return all
}

// exactlyOnce is every scenario's end: every Deployment of every fleet is stamped with
// the hash of its ConfigMap's current content and has rolled exactly rollouts times
// (ReplicaSets, revision, pods), and that holds, with no write to any Deployment's spec
// (a late second rollout, or a late nudge that changed the template), until every
// configstamp of procs is idle (see cs.idle: longer than its own retry and rollout
// delays) and for settle after. It logs how long after since every stamp was right
// (time to heal).
func exactlyOnce(t *testing.T, fleets []*fleet, rollouts int, since time.Time, after string, procs ...*cs) {
	t.Helper()
	want := wants(t, fleets)
	framework.Eventually(t, 4*time.Minute, "every Deployment stamped", func() error {
		var errs []error
		for _, f := range fleets {
			if _, err := f.stamped(want[f]); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
	t.Logf("all %d Deployments stamped %.1fs after %s", total(fleets), time.Since(since).Seconds(), after)
	held := rolledOut(t, fleets, rollouts, want)
	began := time.Now()
	var idleAt time.Time
	for {
		if err := held(); err != nil {
			t.Fatalf("exactly once: %v", err)
		}
		busy := ""
		for _, c := range procs {
			if why := c.idle(); why != "" {
				busy = fmt.Sprintf("configstamp (pid %d): %s", c.PID(), why)
				break
			}
		}
		switch {
		case busy != "":
			if !idleAt.IsZero() {
				t.Logf("busy again after %.1fs idle: %s", time.Since(idleAt).Seconds(), busy)
			}
			idleAt = time.Time{}
			if time.Since(began) > 3*time.Minute {
				t.Fatalf("configstamp not idle within 3m of the rollouts: %s", busy)
			}
		case idleAt.IsZero():
			idleAt = time.Now()
		case time.Since(idleAt) >= settle:
			t.Logf("held for %.1fs after the rollouts, configstamp idle for the last %.1fs", time.Since(began).Seconds(), time.Since(idleAt).Seconds())
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}
