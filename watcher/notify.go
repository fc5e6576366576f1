package watcher

import (
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/notify"
	"github.com/configstamp/configstamp/stamp"
)

// notifyRolled tells the notifier of a rollout a nudge caused, keyed by the change: the
// sources whose digest differs between the stamps, with their new digests, so that every
// workload one change rolled shares one message. reason is its ConfigChanged Event's.
func (r *workloadReconciler) notifyRolled(obj client.Object, before, after, hash, reason string) {
	if r.notify == nil {
		return
	}
	now := stamp.ParseSources(after)
	var change, srcs []string
	for _, src := range stamp.ChangedSources(before, after) {
		d := now[src]
		if d == "" {
			d = "gone"
		}
		change, srcs = append(change, src+"="+d), append(srcs, src)
	}
	if len(change) == 0 {
		// A restart onto the stamp it has, or no sources list: its own message.
		change = []string{"config-hash=" + stamp.ShortHash(hash)}
	}
	r.notify.Notify(notify.Event{Kind: notify.Rolled, Namespace: obj.GetNamespace(), Workload: r.kind.Kind + "/" + obj.GetName(),
		Change: strings.Join(change, ","), Sources: srcs, Reason: reason})
}

// notifyHeld tells the notifier of a rollout held back (kind HeldMissing or HeldPaused);
// change tells one hold from another (reported once an hour).
func (r *workloadReconciler) notifyHeld(obj client.Object, kind notify.Kind, change, reason string) {
	if r.notify == nil {
		return
	}
	r.notify.Notify(notify.Event{Kind: kind, Namespace: obj.GetNamespace(), Workload: r.kind.Kind + "/" + obj.GetName(), Change: change, Reason: reason})
}
