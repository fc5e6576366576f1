package faults

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/hashdoc"
	"github.com/configstamp/configstamp/test/internal/apitime"
)

// backlogSize is how many Deployments configstamp is installed over (no replicas: their
// ReplicaSets count the rollouts, and no pods load the machine).
const backlogSize = 2000

// TestLeaderChangeInAdoptionBacklog installs configstamp (two replicas, leader election)
// over backlogSize Deployments; the leader adopts them slowly (one at a time, on a low
// request budget), so adoption is still under way when two ConfigMaps are edited: one
// consumed by a Deployment installed over and not yet adopted (the last by name), one
// by a Deployment created after configstamp started (stamped). The leader is killed
// with SIGKILL inside the edits' debounce window, before it has nudged anything; the
// other replica takes over and adopts the rest. Exactly those two Deployments roll,
// once each; none of the others does. (Before decide.WhyOwed, the new leader recorded
// the new config as the one the unadopted Deployment's pods run: nothing rolled.)
func TestLeaderChangeInAdoptionBacklog(t *testing.T) {
	ns := env.NewNamespace(t, true)
	atEnd(t, func() { (&fleet{ns: ns}).optOut(t) })
	for _, name := range []string{configMapName, "cfg-before", "cfg-after"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{key: "1"}}
		if err := env.Client.Create(bg, cm); err != nil {
			t.Fatal(err)
		}
	}
	apitime.NextSecond()
	names := make([]string, backlogSize)
	for i := range names {
		names[i] = fmt.Sprintf("app-%04d", i)
	}
	began := time.Now()
	parallel(t, names, func(name string) error { return env.Client.Create(bg, unscaled(ns, name, configMapName)) })
	if err := env.Client.Create(bg, unscaled(ns, "zz-before", "cfg-before")); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 3*time.Minute, "a ReplicaSet for each Deployment", func() error {
		return rolloutsAre(ns, backlogSize+1, nil)
	})
	t.Logf("created %d Deployments and their ReplicaSets in %.1fs", backlogSize+1, time.Since(began).Seconds())
	apitime.NextSecond()

	// The first leader adopts slowly; the second has budget to spare.
	p := newPair(t, "--debounce", "3s")
	p.opts[0].Args = append(p.opts[0].Args, "--concurrency", "1", "--kube-api-qps", "2", "--kube-api-burst", "2")
	p.opts[1].Args = append(p.opts[1].Args, "--concurrency", "4", "--kube-api-qps", "200", "--kube-api-burst", "400")
	p.restart(t, 0)
	framework.Eventually(t, time.Minute, "replica 0 leads", func() error {
		if !p.led(0) {
			return fmt.Errorf("replica 0 does not lead")
		}
		return nil
	})
	p.restart(t, 1)
	if err := env.Client.Create(bg, unscaled(ns, "zz-after", "cfg-after")); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, "zz-after stamped and rolled out", func() error {
		return rolloutsAre(ns, 1, map[string]int{"zz-after": 1})
	})
	apitime.NextSecond()
	for _, name := range []string{"cfg-before", "cfg-after"} {
		setKey(t, ns, name, "2")
	}
	inDebounce(t, p.replicas[0], 2)
	adopted, err := records(ns)
	if err != nil {
		t.Fatal(err)
	}
	if adopted["zz-before"] {
		t.Fatal("zz-before was adopted before the edit: no backlog left")
	}
	t.Logf("%d of %d Deployments installed over adopted when the leader was killed", len(adopted)-1, backlogSize+1)
	killed := p.kill(t, 0)
	p.takenOver(t, 1, killed)

	want := map[string]int{"zz-before": 2, "zz-after": 2}
	framework.Eventually(t, 3*time.Minute, "the two edited Deployments rolled, every other adopted", func() error {
		if err := rolloutsAre(ns, 1, want); err != nil {
			return err
		}
		adopted, err := records(ns)
		if err != nil {
			return err
		}
		if len(adopted) != backlogSize+2 {
			return fmt.Errorf("%d of %d Deployments carry a record", len(adopted), backlogSize+2)
		}
		return nil
	})
	t.Logf("all adopted, the two edited rolled, %.1fs after the kill", time.Since(killed).Seconds())
	for name, cm := range map[string]string{"zz-before": "cfg-before", "zz-after": "cfg-after"} {
		d := env.Deployment(t, ns, name)
		if got, wantHash := d.Spec.Template.Annotations[stamp.HashAnnotation], configHash(t, ns, cm); got != wantHash {
			t.Errorf("%s: hash %q, want %q", name, got, wantHash)
		}
	}
	framework.Eventually(t, 3*time.Minute, "the new leader idle", func() error {
		if why := p.replicas[1].idle(); why != "" {
			return fmt.Errorf("%s", why)
		}
		return nil
	})
	time.Sleep(settle) // a late rollout would show by now
	if err := rolloutsAre(ns, 1, want); err != nil {
		t.Fatalf("after the new leader went idle: %v", err)
	}
}

// unscaled is a Deployment of no replicas that mounts ConfigMap cm.
func unscaled(ns, name, cm string) *appsv1.Deployment {
	d := deployment(ns, name)
	d.Spec.Replicas = ptr.To[int32](0)
	d.Spec.Template.Spec.Volumes[0].ConfigMap.Name = cm
	return d
}

// setKey sets key of ConfigMap ns/name to value.
func setKey(t *testing.T, ns, name, value string) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(bg, client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data[key] = value
	if err := env.Client.Update(bg, cm); err != nil {
		t.Fatalf("edit configmap %s/%s: %v", ns, name, err)
	}
}

// rolloutsAre checks that every Deployment of ns has rolled out the number of times
// want names (counted as the ReplicaSets it owns), the others each once; n is how
// many Deployments there are at least.
func rolloutsAre(ns string, n int, want map[string]int) error {
	var deps appsv1.DeploymentList
	if err := env.Client.List(bg, &deps, client.InNamespace(ns)); err != nil {
		return err
	}
	if len(deps.Items) < n {
		return fmt.Errorf("%d Deployments, want at least %d", len(deps.Items), n)
	}
	var sets appsv1.ReplicaSetList
	if err := env.Client.List(bg, &sets, client.InNamespace(ns)); err != nil {
		return err
	}
	owned := map[string]int{}
	for _, rs := range sets.Items {
		if ref := metav1.GetControllerOf(&rs); ref != nil {
			owned[string(ref.UID)]++
		}
	}
	for _, d := range deps.Items {
		w, ok := want[d.Name]
		if !ok {
			w = 1
		}
		if got := owned[string(d.UID)]; got != w {
			return fmt.Errorf("%s: %d ReplicaSets, want %d", d.Name, got, w)
		}
		if !ok && d.Spec.Template.Annotations[stamp.HashAnnotation] != "" {
			return fmt.Errorf("%s: stamped, want it adopted unstamped", d.Name)
		}
	}
	return nil
}

// records names the Deployments of ns that carry a valid record.
func records(ns string) (map[string]bool, error) {
	var deps appsv1.DeploymentList
	if err := env.Client.List(bg, &deps, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, d := range deps.Items {
		if _, ok := stamp.ObservedFor(d.Annotations, &d.Spec.Template); ok {
			out[d.Name] = true
		}
	}
	return out, nil
}

// configHash is the hash of ConfigMap cm of ns as a volume of all its keys, from
// docs/hash.md's encoding.
func configHash(t *testing.T, ns, cm string) string {
	t.Helper()
	var failed error
	h := hashdoc.Hash([]hashdoc.Source{{Name: cm}}, func(name string) *corev1.ConfigMap {
		var c corev1.ConfigMap
		if err := env.Client.Get(bg, client.ObjectKey{Namespace: ns, Name: name}, &c); err != nil {
			failed = err
			return nil
		}
		return &c
	}, framework.HashKey, ns)
	if failed != nil {
		t.Fatal(failed)
	}
	return h
}
