package watcher

import (
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// testQueue is an unnamed fair queue (no metrics), shut down when the test ends.
func testQueue(t *testing.T) *fairQueue {
	q := newFairQueue("", workqueue.DefaultTypedControllerRateLimiter[reconcile.Request](), logr.Discard())
	t.Cleanup(q.ShutDown)
	return q
}

func req(ns string, i int) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: fmt.Sprintf("w%d", i)}}
}

// TestFairQueueServesNamespacesInTurn: one namespace with thousands queued delays another
// namespace's item by a bounded number of items (its tier), not by its backlog; within a
// namespace, first come first served; an item added twice is queued (and counted) once.
func TestFairQueueServesNamespacesInTurn(t *testing.T) {
	q := testQueue(t)
	for i := range 3000 {
		q.Add(req("flood", i))
	}
	q.Add(req("flood", 0)) // deduplicated
	if n, deepest := q.stats(); n != 1 || deepest != 3000 {
		t.Fatalf("stats: %d namespaces, deepest %d; want 1, 3000", n, deepest)
	}
	q.Add(req("small", 0))
	q.Add(req("small", 1))
	var order []reconcile.Request
	for q.Len() > 0 {
		item, _ := q.Get()
		q.Done(item)
		order = append(order, item)
	}
	if len(order) != 3002 {
		t.Fatalf("%d items served, want 3002", len(order))
	}
	pos := map[reconcile.Request]int{}
	for i, item := range order {
		pos[item] = i
	}
	// small's first item was queued behind none of its own: at most the flood's one item
	// at the top priority comes before it; its second, behind one: at most two.
	if p := pos[req("small", 0)]; p > 1 {
		t.Errorf("small's first item served %dth, want within the first 2", p+1)
	}
	if p := pos[req("small", 1)]; p > 3 {
		t.Errorf("small's second item served %dth, want within the first 4", p+1)
	}
	last := -1
	for i := range 3000 {
		p := pos[req("flood", i)]
		if p < last {
			t.Fatalf("flood's item %d served before an earlier one", i)
		}
		last = p
	}
	if n, deepest := q.stats(); n != 0 || deepest != 0 {
		t.Fatalf("stats once drained: %d namespaces, deepest %d", n, deepest)
	}
}

// TestFairQueueRetriesAtTheirNamespacesTier: the controller's retries go through the
// count as well: a retry of the flood's is counted in its namespace's depth and waits
// behind the small namespace's new item.
func TestFairQueueRetriesAtTheirNamespacesTier(t *testing.T) {
	q := testQueue(t)
	for i := range 100 {
		q.Add(req("flood", i))
	}
	item, _ := q.Get()
	q.AddRateLimited(item) // retried: behind 99 of its own
	q.Done(item)
	if _, deepest := q.stats(); deepest != 100 {
		t.Fatalf("deepest %d after the retry, want 100", deepest)
	}
	q.Add(req("small", 0))
	if first, _ := q.Get(); first != req("small", 0) {
		t.Fatalf("served %v first, want the small namespace's item", first)
	}
}

// TestFairQueueKeepsLowPriorityBehind: an item added at controller-runtime's low
// priority (the initial list) stays behind every other, even one of a deep namespace,
// and keeps that band when the controller retries it.
func TestFairQueueKeepsLowPriorityBehind(t *testing.T) {
	q := testQueue(t)
	q.AddWithOpts(priorityqueue.AddOpts{Priority: new(handler.LowPriority)}, req("listed", 0))
	for i := range 20 {
		q.Add(req("deep", i))
	}
	for i := range 20 {
		if item, _ := q.Get(); item == req("listed", 0) {
			t.Fatalf("the low-priority item served %dth, before the deep namespace's", i+1)
		}
	}
	item, p, _ := q.GetWithPriority()
	if item != req("listed", 0) || p > handler.LowPriority {
		t.Fatalf("served %v at %d, want the low-priority item at or below %d", item, p, handler.LowPriority)
	}
	q.AddWithOpts(priorityqueue.AddOpts{Priority: new(p)}, item) // the controller's retry
	q.Add(req("deep", 99))
	if first, _ := q.Get(); first != req("deep", 99) {
		t.Fatalf("served %v first, want the retried low-priority item behind", first)
	}
}
