package explain

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Reasons of the Events configstamp records on workloads (watcher's Reason*).
var eventReasons = []string{"ConfigChanged", "StampBypassed", "ConfigMissing", "StampTooLarge", "ConfigUnreadable", "ConfigReadTimeout"}

// maxEvents is how many of the latest Events a report shows.
const maxEvents = 10

// Events returns configstamp's Events among evs, oldest first, the latest maxEvents;
// Events that say the same (type, reason and message) are shown once, at the latest
// time, with their counts added.
func Events(evs []corev1.Event) []Event {
	out := []Event{}
	same := map[[3]string]int{}
	for _, e := range evs {
		if !slices.Contains(eventReasons, e.Reason) {
			continue
		}
		ev := Event{Time: eventTime(e), Type: e.Type, Reason: e.Reason, Message: e.Message, Count: max(e.Count, 1)}
		if e.Series != nil {
			ev.Count = max(ev.Count, e.Series.Count)
		}
		id := [3]string{e.Type, e.Reason, e.Message}
		if i, ok := same[id]; ok {
			out[i].Count += ev.Count
			if ev.Time.After(out[i].Time) {
				out[i].Time = ev.Time
			}
			continue
		}
		same[id] = len(out)
		out = append(out, ev)
	}
	slices.SortStableFunc(out, func(a, b Event) int { return a.Time.Compare(b.Time) })
	if len(out) > maxEvents {
		out = out[len(out)-maxEvents:]
	}
	return out
}

// ofObject keeps the Events about obj itself: not those of an earlier object of the
// same name (another UID).
func ofObject(evs []corev1.Event, obj client.Object) []corev1.Event {
	if obj.GetUID() == "" {
		return evs
	}
	var out []corev1.Event
	for _, e := range evs {
		if e.InvolvedObject.UID == "" || e.InvolvedObject.UID == obj.GetUID() {
			out = append(out, e)
		}
	}
	return out
}

// eventTime is when an Event (core or events.k8s.io, which the watcher writes) last
// happened.
func eventTime(e corev1.Event) time.Time {
	t := e.EventTime.Time
	for _, c := range []time.Time{e.LastTimestamp.Time, e.FirstTimestamp.Time, e.CreationTimestamp.Time} {
		if c.After(t) {
			t = c
		}
	}
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	return t
}
