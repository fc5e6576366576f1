package kinds

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/apitime"
	"github.com/configstamp/configstamp/test/internal/configmaps"
)

// options run configstamp as these tests need it: Argo Rollouts stamped and watched
// once their CRD exists.
var options = framework.Options{Args: []string{"--argo-rollouts"}}

// revKind is a kind that rolls through ControllerRevisions.
type revKind struct {
	name string
	new  func(ns, name, cm string) client.Object
}

var revKinds = []revKind{{"StatefulSet", newStatefulSet}, {"DaemonSet", newDaemonSet}}

// installedOver are the workloads that exist before configstamp first starts.
type installedOver struct {
	ns       string // opted in by its label: a StatefulSet and a DaemonSet
	optNs    string // not opted in: a Deployment opted in by its own label, one not
	revs     []client.Object
	labelled *appsv1.Deployment
	plain    *appsv1.Deployment
	// in ns: a suspended CronJob, and a Job copied from it
	cronJob *batchv1.CronJob
	oldJob  *batchv1.Job
}

// installOver creates, before configstamp ever ran, a StatefulSet and a DaemonSet (each
// named after its kind in lower case and consuming the ConfigMap of that name) in an
// opted-in namespace, and in a namespace that is not, two Deployments consuming the
// ConfigMap cfg, one labelled to opt in; and waits for their first rollouts. The
// ConfigMaps are written a second before the workloads (the API server's times have
// one-second resolution).
func installOver(t *testing.T) *installedOver {
	o := &installedOver{ns: env.NewNamespace(t, true), optNs: env.NewNamespace(t, false)}
	for _, k := range revKinds {
		createConfigMap(t, o.ns, strings.ToLower(k.name), map[string]string{"k": "1"}, nil)
	}
	createConfigMap(t, o.optNs, "cfg", map[string]string{"k": "1"}, nil)
	apitime.NextSecond()
	for _, k := range revKinds {
		name := strings.ToLower(k.name)
		obj := k.new(o.ns, name, name)
		create(t, obj)
		o.revs = append(o.revs, obj)
	}
	o.labelled = newDeployment(o.optNs, "labelled", "cfg", optedIn)
	o.plain = newDeployment(o.optNs, "plain", "cfg", nil)
	create(t, o.labelled)
	create(t, o.plain)
	for _, obj := range o.revs {
		env.ExpectRevisions(t, obj, 1, 0)
	}
	env.ExpectReplicaSets(t, o.optNs, "labelled", 1, 0)
	env.ExpectReplicaSets(t, o.optNs, "plain", 1, 0)
	o.cronJob, o.oldJob = installedCronJob(t, o.ns)
	return o
}

// recorded waits until configstamp has recorded the config each opted-in workload runs,
// without stamping it.
func (o *installedOver) recorded(t *testing.T) {
	for _, obj := range o.revs {
		waitRecord(t, env.Client, obj, docHash(t, o.ns, obj.GetName()))
	}
	waitRecord(t, env.Client, o.labelled, docHash(t, o.optNs, "cfg"))
}

// afterRestart collects checks that a restart of configstamp rolls nothing.
var afterRestart struct {
	sync.Mutex
	checks []func(t *testing.T)
}

func checkAfterRestart(f func(t *testing.T)) {
	afterRestart.Lock()
	defer afterRestart.Unlock()
	afterRestart.checks = append(afterRestart.checks, f)
}

// TestKinds creates workloads before configstamp first starts (Argo's Rollout CRD not
// installed), starts it, and runs every scenario at once: StatefulSets and DaemonSets
// installed over and created after, the per-workload opt-in both ways (and by a label
// added to a running Deployment), one webhook call per request, extra-sources, and the
// Rollout CRD installed while configstamp runs. Then it restarts configstamp, now with
// the CRD installed before it starts.
func TestKinds(t *testing.T) {
	over := installOver(t)
	cs := env.Start(t, options)
	started := time.Now()
	over.recorded(t)

	t.Run("while running", func(t *testing.T) {
		for i, k := range revKinds {
			t.Run(k.name+"/installed over", func(t *testing.T) {
				t.Parallel()
				revisionScenario(t, over.revs[i])
			})
			t.Run(k.name+"/created after", func(t *testing.T) {
				t.Parallel()
				ns := env.NewNamespace(t, true)
				createConfigMap(t, ns, "cfg", map[string]string{"k": "1"}, nil)
				apitime.NextSecond()
				obj := k.new(ns, "cfg", "cfg")
				create(t, obj)
				stampedWith(t, obj, docHash(t, ns, "cfg")) // the response to the create
				revisionScenario(t, obj)
			})
		}
		t.Run("CronJob/installed over", func(t *testing.T) {
			t.Parallel()
			testCronJobInstalledOver(t, over.cronJob, over.oldJob)
		})
		t.Run("CronJob/created after", func(t *testing.T) {
			t.Parallel()
			testCronJobCreatedAfter(t)
		})
		t.Run("CronJob/owner annotations", func(t *testing.T) {
			t.Parallel()
			testCronJobOwnerAnnotations(t)
		})
		t.Run("opt-in by label/installed over", func(t *testing.T) {
			t.Parallel()
			optInScenario(t, over.labelled, over.plain)
		})
		t.Run("opt-in by label/created after", func(t *testing.T) {
			t.Parallel()
			ns := env.NewNamespace(t, false)
			createConfigMap(t, ns, "cfg", map[string]string{"k": "1"}, nil)
			apitime.NextSecond()
			labelled, plain := newDeployment(ns, "labelled", "cfg", optedIn), newDeployment(ns, "plain", "cfg", nil)
			create(t, labelled)
			create(t, plain)
			stampedWith(t, labelled, docHash(t, ns, "cfg"))
			untouched(t, plain)
			optInScenario(t, labelled, plain)
		})
		t.Run("opt-in by label/label added later", func(t *testing.T) {
			t.Parallel()
			ns := env.NewNamespace(t, false)
			createConfigMap(t, ns, "cfg", map[string]string{"k": "1"}, nil)
			apitime.NextSecond()
			labelled, plain := newDeployment(ns, "labelled", "cfg", nil), newDeployment(ns, "plain", "cfg", nil)
			create(t, labelled)
			create(t, plain)
			env.ExpectReplicaSets(t, ns, labelled.Name, 1, 0)
			untouched(t, labelled)
			// Past the ConfigMap's creation burst: a workload that comes into scope while
			// a write of its config is pending is rolled when the burst ends, even if its
			// pods started after that write (the watcher cannot tell a key removal's time).
			handedOn(t, cs, ns, "cfg")
			// The team opts its running Deployment in: recorded, not rolled.
			patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, stamp.InjectLabel, stamp.InjectValue)))
			if err := env.Client.Patch(bg, labelled, patch); err != nil {
				t.Fatal(err)
			}
			waitRecord(t, env.Client, labelled, docHash(t, ns, "cfg"))
			optInScenario(t, labelled, plain)
		})
		t.Run("one webhook call per request", testOneCallPerRequest)
		t.Run("extra-sources", testExtraSources)
		t.Run("extra-sources malformed", testExtraSourcesMalformed)
		t.Run("Argo Rollouts/CRD installed after configstamp started", func(t *testing.T) {
			t.Parallel()
			testRolloutCRDLater(t, cs, started)
		})
	})
	if t.Failed() {
		return
	}

	t.Run("Argo Rollouts/CRD installed before configstamp started", func(t *testing.T) {
		cs.Stop()
		testRolloutCRDFirst(t, func() *framework.Configstamp { return env.Start(t, options) })
		t.Run("the restart rolled nothing", func(t *testing.T) {
			for _, check := range afterRestart.checks {
				check(t)
			}
		})
	})
}

// revisionScenario changes the labels of the workload's ConfigMap (named in its first
// volume), which rolls nothing, then its data, which rolls it once, to the documented
// hash.
func revisionScenario(t *testing.T, obj client.Object) {
	ns, cm := obj.GetNamespace(), template(t, obj).Spec.Volumes[0].ConfigMap.Name
	relabel(t, ns, cm)
	env.ExpectRevisions(t, obj, 1, settle)
	configmaps.SetData(t, env.Client, ns, cm, "k", "2")
	after := env.ExpectRevisions(t, obj, 2, settle)
	stampedWith(t, after, docHash(t, ns, cm))
	checkAfterRestart(func(t *testing.T) { env.ExpectRevisions(t, obj, 2, 0) })
}

// handedOn waits until configstamp's watcher has handed the Deployments consuming the
// ConfigMap ns/name on to their checks: the ConfigMap's burst is over.
func handedOn(t *testing.T, cs *framework.Configstamp, ns, name string) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, "ConfigMap "+name+" quiet", func() error {
		for _, rec := range cs.Logs() {
			if rec["msg"] == "Source quiet; checking its dependents" && rec["namespace"] == ns && rec["name"] == name && rec["kind"] == "Deployment" {
				return nil
			}
		}
		return fmt.Errorf("no hand-on logged")
	})
}
