package watcher

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestHeldBack: a HelmRelease's check waits for sources in a burst at most max from its
// first wait, so sources written without pause cannot hold its request back for ever (a
// burst's own cap, --debounce-max, ends each burst, but a new one may begin before the
// check looks); once it goes on, the next wait counts afresh.
func TestHeldBack(t *testing.T) {
	var h heldBack
	key, other := types.NamespacedName{Namespace: "ns", Name: "hr"}, types.NamespacedName{Namespace: "ns", Name: "other"}
	t0, max := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), 30*time.Second
	for _, c := range []struct {
		at   time.Duration
		wait bool
	}{{0, true}, {10 * time.Second, true}, {max - time.Millisecond, true}, {max, false}, {time.Hour, false}} {
		if got := h.wait(key, t0.Add(c.at), max); got != c.wait {
			t.Errorf("at %s: wait %v, want %v", c.at, got, c.wait)
		}
	}
	if !h.wait(other, t0.Add(time.Hour), max) {
		t.Error("another HelmRelease's first wait refused")
	}
	h.done(key)
	if !h.wait(key, t0.Add(2*time.Hour), max) {
		t.Error("a wait after the check went on is refused")
	}
	h.done(key)
	h.done(other)
	if len(h.since) != 0 {
		t.Errorf("%d waits kept after done", len(h.since))
	}
}
