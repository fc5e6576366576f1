package watcher

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// TestFanOutNeverBlocks: a source with thousands of dependents hands every one of them on
// at once, with nothing taking them from the queue yet (the workload controller busy, or
// not started): the hand-off never waits, so the source worker is free for the next
// source's event.
func TestFanOutNeverBlocks(t *testing.T) {
	const dependents = 3000
	objs := []client.Object{optedInNamespace(), cfgMap("1")}
	for i := range dependents {
		d := cfgDeployment()
		d.Name = fmt.Sprintf("app-%04d", i)
		objs = append(objs, d)
	}
	c := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(objs...).Build()
	// The workloads' store and its index as the watcher's cache keeps them.
	store := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, sourceIndexers(workload.Deployment, stamp.Options{}))
	for _, o := range objs[2:] {
		if err := store.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	sc, err := scope.New(stamp.InjectLabel, nil)
	if err != nil {
		t.Fatal(err)
	}
	queue := testQueue(t)
	states := &workloadStates{}
	r := &sourceReconciler{kind: stamp.ConfigMap.Name, client: c, scope: sc}
	r.addDependents(workloadDependents(workload.Deployment, lookupBy(store), queue, states))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := r.fanOut(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "cfg"}}, true); err != nil {
		t.Fatalf("hand-off of %d dependents: %v", dependents, err)
	}
	if n := queue.Len(); n != dependents {
		t.Fatalf("%d queued, want %d", n, dependents)
	}
	if tr := states.takeTrigger(types.NamespacedName{Namespace: "ns", Name: "app-0042"}); !tr.changed || !tr.handoff {
		t.Fatalf("trigger %+v, want a live change handed on", tr)
	}
}
