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
	s.m[key] = cur
}

// take removes key's pending trigger; fresh is false when none was pending (a retry).
func (s *triggers) take(key types.NamespacedName) (t trigger, fresh bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, fresh = s.m[key]
	delete(s.m, key)
	return t, fresh
}
