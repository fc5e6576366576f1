package watcher

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func (r *workloadReconciler) isOversize(key types.NamespacedName) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.oversize[key]
	return ok
}

func (r *workloadReconciler) resetBypasses(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.bypasses, key)
	delete(r.unreads, key)
}

// untilNextRoll is how long until the workload may be rolled again (zero: now).
func (r *workloadReconciler) untilNextRoll(key types.NamespacedName) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.lastRoll[key]
	if !ok || r.minInterval <= 0 {
		return 0
	}
	return max(0, r.minInterval-time.Since(last))
}

// rolled remembers a rollout; entries older than the interval are dropped as it goes.
func (r *workloadReconciler) rolled(key types.NamespacedName) {
	if r.minInterval <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lastRoll == nil {
		r.lastRoll = map[types.NamespacedName]time.Time{}
	}
	now := time.Now()
	if len(r.lastRoll) > 256 {
		for k, t := range r.lastRoll {
			if now.Sub(t) >= r.minInterval {
				delete(r.lastRoll, k)
			}
		}
	}
	r.lastRoll[key] = now
}

func (r *workloadReconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.lastRoll, key)
	delete(r.bypasses, key)
	delete(r.unreads, key)
	delete(r.oversize, key)
}
