package precision

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/apitime"
	"github.com/configstamp/configstamp/test/internal/concurrent"
)

// fixture is one ConfigMap and the Deployment that consumes it, both named name.
type fixture struct {
	name string
	c    consumer
	data map[string]string
}

var fixtures = []fixture{
	{"whole", volume(nil, false), map[string]string{"k": "1", "other": "x"}},
	{"items", volume([]string{"k"}, false), map[string]string{"k": "1", "hidden": "x"}},
	{"proj", projected("k"), map[string]string{"k": "1", "hidden": "x"}},
	{"keyref", keyRef("k"), map[string]string{"k": "1", "hidden": "x"}},
	{"envfrom", envFrom, map[string]string{"k": "1"}},
	{"req", volume(nil, false), map[string]string{"k": "1"}},
	{"opt", volume(nil, true), map[string]string{"k": "1"}},
	{"flap", volume(nil, false), map[string]string{"n": "0"}},
	{"stopped", volume(nil, false), map[string]string{"k": "1"}},
	{"quiet", volume(nil, false), map[string]string{"k": "1"}},
	{"upgraded", volume(nil, false), map[string]string{"k": "1"}},
	{"paused", volume(nil, false), map[string]string{"k": "1"}},
	{"recreated", volume(nil, false), map[string]string{"k": "1"}},
	{"replaced", volume(nil, false), map[string]string{"k": "1"}},
	{"redeployed", volume(nil, false), map[string]string{"k": "1"}},
	{"applied", volume(nil, false), map[string]string{"k": "1"}}, // written by kubectl apply
}

func fixtureNamed(name string) fixture {
	for _, f := range fixtures {
		if f.name == name {
			return f
		}
	}
	panic("no fixture " + name)
}

// createFixtures creates every fixture in a new opted-in namespace and waits for each
// Deployment's first rollout. The ConfigMaps are written a second before the
// Deployments (the API server's times have one-second resolution).
func createFixtures(t *testing.T) string {
	ns := env.NewNamespace(t, true)
	for _, f := range fixtures {
		createConfigMap(t, ns, f.name, f.data)
	}
	createConfigMap(t, ns, "sts", map[string]string{"k": "1"})
	apitime.NextSecond()
	for _, f := range fixtures {
		if f.name == "applied" {
			applyDeployment(t, ns, "{example.com/team: a}")
			continue
		}
		createDeployment(t, ns, f.name, f.name, f.c)
	}
	createStatefulSet(t, ns, "sts", "sts", volume(nil, false))
	// Written by kubectl apply, ConfigMap and Deployment in one apply: their
	// ConfigMaps are edited while configstamp is killed.
	for _, a := range appliers {
		a.apply(t, ns, a.app(ns, "live-"+a.name, "1"))
	}
	eachFixture(t, func(t testing.TB, f fixture) {
		env.RolledOut(t, ns, f.name)
		if n := len(env.ReplicaSets(t, env.Deployment(t, ns, f.name))); n != 1 {
			t.Errorf("%s: %d ReplicaSets after creation", f.name, n)
		}
	})
	for _, a := range appliers {
		if n := len(env.ReplicaSets(t, env.RolledOut(t, ns, "live-"+a.name))); n != 1 {
			t.Errorf("live-%s: %d ReplicaSets after creation", a.name, n)
		}
	}
	if n := len(env.ControllerRevisions(t, env.StatefulSetRolledOut(t, ns, "sts"))); n != 1 {
		t.Errorf("sts: %d ControllerRevisions after creation", n)
	}
	return ns
}

// recreateStatefulSet deletes the StatefulSet sts and creates it again, the same, after
// setting its ConfigMap's k to data ("": unchanged). It returns the old one's UID.
func recreateStatefulSet(t *testing.T, ns, data string) types.UID {
	t.Helper()
	old := env.StatefulSet(t, ns, "sts").UID
	deleteStatefulSet(t, ns, "sts")
	if data != "" {
		setData(t, ns, "sts", "k", data)
		apitime.NextSecond()
	}
	createStatefulSet(t, ns, "sts", "sts", volume(nil, false))
	return old
}

// statefulSetRecorded asserts that the StatefulSet sts is not rolled after its creation
// (one ControllerRevision) and carries a record of the config its pods run.
func statefulSetRecorded(t testing.TB, ns string) {
	t.Helper()
	revisions(t, ns, "sts", 1)
	waitRecordOf(t, "sts", docHash(t, ns, "sts", volume(nil, false)), func() client.Object { return env.StatefulSet(t, ns, "sts") })
}

// eachFixture runs f for every fixture at once (concurrent.Run) and waits for all.
func eachFixture(t *testing.T, f func(testing.TB, fixture)) {
	t.Helper()
	fs := make([]func(testing.TB), len(fixtures))
	for i, fx := range fixtures {
		fs[i] = func(t testing.TB) { f(t, fx) }
	}
	concurrent.Run(t, fs...)
}

// stamped asserts that the Deployment's pods run the documented hash of its ConfigMap.
func stamped(t *testing.T, ns, name string) {
	t.Helper()
	f := fixtureNamed(name)
	want := docHash(t, ns, name, f.c)
	framework.Eventually(t, time.Minute, "stamp of "+name, func() error {
		if got := env.Deployment(t, ns, name).Spec.Template.Annotations[stamp.HashAnnotation]; got != want {
			return fmt.Errorf("hash %q, want %q", got, want)
		}
		return nil
	})
	env.RolledOut(t, ns, name)
}

// scenarios change one fixture's ConfigMap each and count its rollouts.
var scenarios = []struct {
	name string
	run  func(t *testing.T, ns string)
}{
	{"label-only edit rolls nothing, a data edit once", func(t *testing.T, ns string) {
		patchConfigMap(t, ns, "whole", `{"metadata":{"labels":{"edited":"yes"}}}`)
		rollouts(t, ns, "whole", 1)
		setData(t, ns, "whole", "other", "y")
		rollouts(t, ns, "whole", 2)
		stamped(t, ns, "whole")
	}},
	{"keys volume items do not mount roll nothing", func(t *testing.T, ns string) {
		setData(t, ns, "items", "hidden", "y")
		patchConfigMap(t, ns, "items", `{"metadata":{"labels":{"edited":"yes"}}}`)
		rollouts(t, ns, "items", 1)
		setData(t, ns, "items", "k", "2")
		rollouts(t, ns, "items", 2)
		stamped(t, ns, "items")
	}},
	{"keys projected items do not mount roll nothing", func(t *testing.T, ns string) {
		setData(t, ns, "proj", "hidden", "y")
		rollouts(t, ns, "proj", 1)
		setData(t, ns, "proj", "k", "2")
		rollouts(t, ns, "proj", 2)
		stamped(t, ns, "proj")
	}},
	{"keys configMapKeyRef does not select roll nothing", func(t *testing.T, ns string) {
		setData(t, ns, "keyref", "hidden", "y")
		rollouts(t, ns, "keyref", 1)
		setData(t, ns, "keyref", "k", "2")
		rollouts(t, ns, "keyref", 2)
		stamped(t, ns, "keyref")
	}},
	{"binaryData rolls nothing for envFrom", func(t *testing.T, ns string) {
		patchConfigMap(t, ns, "envfrom", `{"binaryData":{"blob":"AAE="}}`)
		rollouts(t, ns, "envfrom", 1)
		setData(t, ns, "envfrom", "k", "2")
		rollouts(t, ns, "envfrom", 2)
		stamped(t, ns, "envfrom")
	}},
	{"deleting a required ConfigMap holds; re-created unchanged rolls nothing, changed once", func(t *testing.T, ns string) {
		deleteConfigMap(t, ns, "req")
		framework.Eventually(t, 30*time.Second, "ConfigMissing warning", func() error { return findEvent(ns, "req", "ConfigMissing") })
		rollouts(t, ns, "req", 1)
		createConfigMap(t, ns, "req", fixtureNamed("req").data)
		rollouts(t, ns, "req", 1)
		deleteConfigMap(t, ns, "req")
		rollouts(t, ns, "req", 1)
		createConfigMap(t, ns, "req", map[string]string{"k": "2"})
		rollouts(t, ns, "req", 2)
		stamped(t, ns, "req")
	}},
	{"deleting an optional ConfigMap rolls once", func(t *testing.T, ns string) {
		deleteConfigMap(t, ns, "opt")
		rollouts(t, ns, "opt", 2)
		stamped(t, ns, "opt")
	}},
	{"kubectl apply: an unchanged re-apply rolls nothing, one dropping the template annotations (stamp included) once", func(t *testing.T, ns string) {
		gen := env.Deployment(t, ns, "applied").Generation
		for range 2 {
			applyDeployment(t, ns, "{example.com/team: a}")
		}
		if g := env.Deployment(t, ns, "applied").Generation; g != gen {
			t.Fatalf("unchanged re-applies: generation %d -> %d", gen, g)
		}
		applyDeployment(t, ns, "") // kubectl's three-way merge deletes the whole map
		d := rollouts(t, ns, "applied", 2)
		if _, ok := d.Spec.Template.Annotations["example.com/team"]; ok {
			t.Fatalf("template annotations %v kept", d.Spec.Template.Annotations)
		}
		stamped(t, ns, "applied")
	}},
	{"a paused Deployment is held, and rolls once when resumed", func(t *testing.T, ns string) {
		pauseDeployment(t, ns, "paused", true)
		// A release changes its template while it is paused (stamped, not rolled), then
		// its ConfigMap: on resume, one rollout onto both, not one for the template and
		// another for a nudge after it.
		patchDeployment(t, ns, "paused", `{"spec":{"template":{"metadata":{"annotations":{"example.com/release":"2"}}}}}`)
		before := env.Deployment(t, ns, "paused")
		if before.Spec.Template.Annotations[stamp.HashAnnotation] == "" {
			t.Fatal("paused: a template change while paused was not stamped")
		}
		setData(t, ns, "paused", "k", "2")
		framework.Eventually(t, 30*time.Second, "RolloutPaused event", func() error { return findEvent(ns, "paused", "RolloutPaused") })
		// (Paused with a new template, it never completes a rollout: count only.)
		framework.Consistently(t, settle, "paused: one ReplicaSet", func() error {
			if n := len(env.ReplicaSets(t, env.Deployment(t, ns, "paused"))); n != 1 {
				return fmt.Errorf("%d ReplicaSets while paused", n)
			}
			return nil
		})
		// Held: not nudged (its template keeps its stamp), and no record claims its
		// pods run the new config.
		d := env.Deployment(t, ns, "paused")
		if got, was := d.Spec.Template.Annotations[stamp.HashAnnotation], before.Spec.Template.Annotations[stamp.HashAnnotation]; got != was {
			t.Fatalf("paused: stamp %q -> %q while paused", was, got)
		}
		if got, was := d.Annotations[stamp.ObservedAnnotation], before.Annotations[stamp.ObservedAnnotation]; got != was {
			t.Fatalf("paused: record %q -> %q while paused", was, got)
		}
		pauseDeployment(t, ns, "paused", false)
		rollouts(t, ns, "paused", 2)
		stamped(t, ns, "paused")
	}},
	{"a StatefulSet deleted and re-created, with the same config and with other, is stamped at its CREATE and rolls no more", func(t *testing.T, ns string) {
		for _, data := range []string{"", "2"} {
			old := recreateStatefulSet(t, ns, data)
			s := env.StatefulSet(t, ns, "sts")
			if want := docHash(t, ns, "sts", volume(nil, false)); s.UID == old || s.Spec.Template.Annotations[stamp.HashAnnotation] != want {
				t.Fatalf("re-created (k %q): uid %s (was %s), hash %q, want %q", data, s.UID, old, s.Spec.Template.Annotations[stamp.HashAnnotation], want)
			}
			statefulSetRecorded(t, ns)
		}
	}},
	{"a writer that never stops rolls at most once per interval and lands the last write", func(t *testing.T, ns string) {
		const writes, interval = 60, 10 * time.Second // the default --min-rollout-interval
		for i := 1; i <= writes; i++ {
			setData(t, ns, "flap", "n", fmt.Sprint(i))
			time.Sleep(time.Second)
		}
		stamped(t, ns, "flap")
		d := env.RolledOut(t, ns, "flap")
		framework.Consistently(t, settle, "flap settled", func() error {
			if g := env.Deployment(t, ns, "flap").Generation; g != d.Generation {
				return fmt.Errorf("generation %d -> %d", d.Generation, g)
			}
			return nil
		})
		n := len(env.ReplicaSets(t, d)) - 1
		if limit := int(writes*time.Second/interval) + 1; n < 1 || n > limit {
			t.Fatalf("%d rollouts for %d writes a second apart, want 1 to %d", n, writes, limit)
		}
		t.Logf("%d rollouts for %d writes a second apart", n, writes)
	}},
}

// TestPrecision creates every fixture before configstamp ever ran ("installed over") and
// while it runs ("created after"), then runs every scenario on both, then changes config
// while configstamp is killed.
func TestPrecision(t *testing.T) {
	modes := map[string]string{"installed over": createFixtures(t)}
	cs := env.Start(t, framework.Options{})
	eachFixture(t, func(t testing.TB, f fixture) { waitRecord(t, modes["installed over"], f.name) })
	modes["created after"] = createFixtures(t)

	t.Run("while running", func(t *testing.T) {
		for mode, ns := range modes {
			for _, sc := range scenarios {
				t.Run(mode+"/"+sc.name, func(t *testing.T) {
					t.Parallel()
					sc.run(t, ns)
				})
			}
		}
	})
	if t.Failed() {
		return
	}

	t.Run("changed while killed", func(t *testing.T) {
		appliedRollouts := map[string]int{}
		// What the checks on return are judged against: the records configstamp made
		// of the workloads whose config changes while it is down.
		for _, ns := range modes {
			waitRecordOf(t, "sts", "", func() client.Object { return env.StatefulSet(t, ns, "sts") })
			for _, a := range appliers {
				waitRecord(t, ns, "live-"+a.name)
			}
		}
		cs.Kill()
		for mode, ns := range modes {
			setData(t, ns, "stopped", "k", "2")
			// A release that adds a ConfigMap and mounts it, while configstamp is
			// down: the template keeps a stamp made for the old one, but its new pods
			// read the new config.
			createConfigMap(t, ns, "extra", map[string]string{"e": "1"})
			apitime.NextSecond()
			addVolume(t, ns, "upgraded", "extra")
			rollouts(t, ns, "upgraded", 2)
			// ConfigMaps deleted and re-created, with the same content and with
			// other content; a Deployment deleted and re-created (admitted unstamped).
			deleteConfigMap(t, ns, "recreated")
			deleteConfigMap(t, ns, "replaced")
			createConfigMap(t, ns, "recreated", fixtureNamed("recreated").data)
			createConfigMap(t, ns, "replaced", map[string]string{"k": "2"})
			deleteDeployment(t, ns, "redeployed")
			createDeployment(t, ns, "redeployed", "redeployed", fixtureNamed("redeployed").c)
			if h := env.RolledOut(t, ns, "redeployed").Spec.Template.Annotations[stamp.HashAnnotation]; h != "" {
				t.Fatalf("redeployed: stamped while configstamp was killed: %s", h)
			}
			// A StatefulSet deleted and re-created: with the same config installed
			// over, with other config (its ConfigMap edited before) created after.
			data := ""
			if mode == "created after" {
				data = "3"
			}
			recreateStatefulSet(t, ns, data)
			if h := env.StatefulSetRolledOut(t, ns, "sts").Spec.Template.Annotations[stamp.HashAnnotation]; h != "" {
				t.Fatalf("sts: stamped while configstamp was killed: %s", h)
			}
			// Written by kubectl apply (client-side, and as Argo CD does): a
			// ConfigMap edited, and a ConfigMap and the Deployment mounting it created
			// in one apply (admitted unstamped).
			for _, a := range appliers {
				a.apply(t, ns, configMapManifest("live-"+a.name, "2")+"---\n"+a.app(ns, "down-"+a.name, "1"))
				if h := env.RolledOut(t, ns, "down-"+a.name).Spec.Template.Annotations[stamp.HashAnnotation]; h != "" {
					t.Fatalf("down-%s: stamped while configstamp was killed: %s", a.name, h)
				}
			}
			// Client-side applies that give the template annotations, then drop them
			// (the three-way merge deletes the map, stamp included): the template
			// rolls unstamped, its pods reading the config as it is.
			applyDeployment(t, ns, "{example.com/team: b}")
			applyDeployment(t, ns, "")
			d := env.RolledOut(t, ns, "applied")
			if h := d.Spec.Template.Annotations[stamp.HashAnnotation]; h != "" {
				t.Fatalf("applied: stamp %s kept by an apply dropping the template annotations", h)
			}
			appliedRollouts[ns] = len(env.ReplicaSets(t, d))
		}
		// A Deployment created while configstamp is down (the registration stays: the
		// API server admits it unstamped), whose ConfigMap then changes.
		late := modes["created after"]
		createConfigMap(t, late, "late", map[string]string{"k": "1"})
		apitime.NextSecond()
		createDeployment(t, late, "late", "late", volume(nil, false))
		if h := env.RolledOut(t, late, "late").Spec.Template.Annotations[stamp.HashAnnotation]; h != "" {
			t.Fatalf("stamped while configstamp was killed: %s", h)
		}
		apitime.NextSecond()
		setData(t, late, "late", "k", "2")

		env.Start(t, framework.Options{})
		for mode, ns := range modes {
			t.Run(mode+"/re-created ConfigMaps", func(t *testing.T) {
				t.Parallel()
				rollouts(t, ns, "recreated", 1)
				rollouts(t, ns, "replaced", 2)
				stamped(t, ns, "replaced")
			})
			t.Run(mode+"/unstamped by kubectl apply", func(t *testing.T) {
				t.Parallel()
				// Recorded, not rolled again; stamped by its next config change.
				waitRecord(t, ns, "applied")
				n := appliedRollouts[ns]
				rollouts(t, ns, "applied", n)
				setData(t, ns, "applied", "k", "2")
				rollouts(t, ns, "applied", n+1)
				stamped(t, ns, "applied")
			})
			t.Run(mode+"/re-created Deployment", func(t *testing.T) {
				t.Parallel()
				// Its pods run the config as it is: recorded, not rolled.
				waitRecord(t, ns, "redeployed")
				rollouts(t, ns, "redeployed", 1)
			})
			t.Run(mode+"/re-created StatefulSet, written by kubectl apply", func(t *testing.T) {
				t.Parallel()
				// At once: their settle windows overlap.
				checks := []func(testing.TB){func(t testing.TB) {
					// Its pods run the config as it is: recorded, not rolled.
					statefulSetRecorded(t, ns)
					if h := env.StatefulSet(t, ns, "sts").Spec.Template.Annotations[stamp.HashAnnotation]; h != "" {
						t.Errorf("sts: template written on return: stamp %s", h)
					}
				}}
				for _, a := range appliers {
					checks = append(checks, func(t testing.TB) {
						// Created while down: its pods run the config as it is:
						// adopted, recorded, not rolled.
						down := "down-" + a.name
						waitRecordOf(t, down, docHash(t, ns, down, volume(nil, false)), func() client.Object { return env.Deployment(t, ns, down) })
						rollouts(t, ns, down, 1)
					}, func(t testing.TB) {
						// Its ConfigMap edited while down: rolled once onto it.
						live := "live-" + a.name
						d := rollouts(t, ns, live, 2)
						if got, want := d.Spec.Template.Annotations[stamp.HashAnnotation], docHash(t, ns, live, volume(nil, false)); got != want {
							t.Errorf("%s: hash %q, want %q", live, got, want)
						}
					})
				}
				concurrent.Run(t, checks...)
			})
			t.Run(mode, func(t *testing.T) {
				t.Parallel()
				rollouts(t, ns, "stopped", 2)
				stamped(t, ns, "stopped")
				rollouts(t, ns, "quiet", 1)
				rollouts(t, ns, "whole", 2)
				// Its pods already run the config: recorded, not rolled again.
				waitRecord(t, ns, "upgraded")
				rollouts(t, ns, "upgraded", 2)
			})
		}
		d := rollouts(t, late, "late", 2)
		if got, want := d.Spec.Template.Annotations[stamp.HashAnnotation], docHash(t, late, "late", volume(nil, false)); got != want {
			t.Fatalf("late: hash %q, want %q", got, want)
		}
	})
}
