package watcher

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// trigger is why a Deployment is checked, kept beside the workqueue (which holds keys
// only) until the check takes it.
type trigger struct {
	// changed: a ConfigMap it consumes really changed while the watcher watched (not a
	// replay of the initial list), so its pods run older config than what is current.
	changed bool
	// event: an event queued it (not the retry of a failed check), so a bypass gets a
	// new set of retries.
	event bool
	// handoff: a ConfigMap's debounce handed it on (the burst is over, though it is
	// still marked pending until every dependent is handed on).
	handoff bool
}

// triggers holds the pending trigger of each queued Deployment.
type triggers struct {
	mu sync.Mutex
	m  map[types.NamespacedName]trigger
}

// add merges t into key's pending trigger.
func (s *triggers) add(key types.NamespacedName, t trigger) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[types.NamespacedName]trigger{}
	}
	cur := s.m[key]
	cur.changed = cur.changed || t.changed
	cur.event = cur.event || t.event
	cur.handoff = cur.handoff || t.handoff
	s.m[key] = cur
}

// take removes key's pending trigger (zero when none is pending).
func (s *triggers) take(key types.NamespacedName) trigger {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.m[key]
	delete(s.m, key)
	return t
}

// changedSince reports whether a live change is pending for key: one that arrived after
// the running check took its trigger (that check must not record over it).
func (s *triggers) changedSince(key types.NamespacedName) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[key].changed
}
