package watcher

import (
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// fairTiers is how many priorities the fair queue gives in each band: a namespace's item
// queued behind d of its own gets priority -min(d, fairTiers-1) (below
// handler.LowPriority for low-priority adds). Few, so that the queue's depth metric
// (labelled by priority) stays within controller-runtime's cardinality limit (25).
const fairTiers = 8

// fairQueue is a controller's queue: controller-runtime's priority queue (it
// deduplicates, delays, rate-limits retries and exports the workqueue metrics), with
// every item's priority set by how many items its namespace has queued before it. So
// checks are served round-robin across namespaces, up to fairTiers deep: an item queued
// behind d of its namespace's own waits behind at most min(d, fairTiers-1)+1 of the items
// any other namespace has queued by then, however many (a flood, a fan-out of
// thousands). Priorities do not age: items queued later at a higher tier go first. Namespaces deeper than that share the lowest priority, first come first
// served. Every add goes through it (handlers, hand-offs, the re-check, the
// controller's retries); the count is kept beside the queue, which holds keys only.
// The controller's own retries are not counted: one waiting (backoff, a RequeueAfter of
// minutes) takes its namespace's tier of the moment but does not deepen it, so a
// namespace with many workloads waiting on slow retries (unreadable config, retried
// every few minutes, for ever) does not have its live events put last. Events are
// counted, debounced ones (AddAfter) included: they are work about to be done.
type fairQueue struct {
	priorityqueue.PriorityQueue[reconcile.Request]

	mu sync.Mutex
	// queued are the items counted in depth: added (not as a retry), not yet handed out.
	queued map[reconcile.Request]struct{}
	// depth is how many items each namespace has queued (no entry: none).
	depth map[string]int
}

var _ priorityqueue.PriorityQueue[reconcile.Request] = &fairQueue{}

// newFairQueue makes the queue of the controller name, retried with rl.
func newFairQueue(name string, rl workqueue.TypedRateLimiter[reconcile.Request], log logr.Logger) *fairQueue {
	q := &fairQueue{queued: map[reconcile.Request]struct{}{}, depth: map[string]int{}}
	q.PriorityQueue = priorityqueue.New(name, func(o *priorityqueue.Opts[reconcile.Request]) {
		o.RateLimiter = rl
		o.Log = log
	})
	if name != "" { // unnamed: no metrics (unit tests)
		queueDepth.set(name, q.stats)
	}
	return q
}

// newQueue hands q to a controller (controller.Options.NewQueue).
func (q *fairQueue) newQueue(string, workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	return q
}

// AddWithOpts adds items at their namespace's fair priority. Those o gives
// controller-runtime's low priority (handler.LowPriority: the initial list, resyncs; and
// their retries) stay behind all others, fair among themselves.
func (q *fairQueue) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	band := 0
	if o.Priority != nil && *o.Priority <= handler.LowPriority {
		band = handler.LowPriority
	}
	// The controller retries with the priority it took the item at and a delay (backoff,
	// RequeueAfter); every other add (handlers, hand-offs, the re-check) names none.
	retry := o.Priority != nil && (o.After > 0 || o.RateLimited)
	for _, item := range items {
		o.Priority = new(band + q.count(item, !retry))
		q.PriorityQueue.AddWithOpts(o, item)
	}
}

// count counts item in its namespace's depth (when counted: not a retry), unless it is
// counted already, and returns its priority.
func (q *fairQueue) count(item reconcile.Request, counted bool) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	d := q.depth[item.Namespace]
	if _, ok := q.queued[item]; ok {
		d-- // queued already: behind d-1 of its own
	} else if counted {
		q.queued[item] = struct{}{}
		q.depth[item.Namespace]++
	}
	return -min(d, fairTiers-1)
}

// taken uncounts an item handed out.
func (q *fairQueue) taken(item reconcile.Request) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.queued[item]; !ok {
		return
	}
	delete(q.queued, item)
	q.queued = emptied(q.queued)
	if q.depth[item.Namespace]--; q.depth[item.Namespace] <= 0 {
		delete(q.depth, item.Namespace)
	}
}

// stats returns how many namespaces have items queued and the most one of them has.
func (q *fairQueue) stats() (namespaces, deepest int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, d := range q.depth {
		deepest = max(deepest, d)
	}
	return len(q.depth), deepest
}

// The adds and gets of the workqueue interface, through the count.

func (q *fairQueue) Add(item reconcile.Request) { q.AddWithOpts(priorityqueue.AddOpts{}, item) }

func (q *fairQueue) AddAfter(item reconcile.Request, after time.Duration) {
	q.AddWithOpts(priorityqueue.AddOpts{After: after}, item)
}

func (q *fairQueue) AddRateLimited(item reconcile.Request) {
	q.AddWithOpts(priorityqueue.AddOpts{RateLimited: true}, item)
}

// GetWithPriority is what the controller takes items with. An add of the same item
// racing with it may go uncounted (its namespace then looks one item shallower while
// it waits): never counted twice.
func (q *fairQueue) GetWithPriority() (reconcile.Request, int, bool) {
	item, p, shutdown := q.PriorityQueue.GetWithPriority()
	if !shutdown {
		q.taken(item)
	}
	return item, p, shutdown
}

func (q *fairQueue) Get() (reconcile.Request, bool) {
	item, _, shutdown := q.GetWithPriority()
	return item, shutdown
}
