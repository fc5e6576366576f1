package watcher

import (
	"context"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/notify"
	"github.com/configstamp/configstamp/stamp"
)

// notifyRolled tells the notifier of a rollout a nudge caused, keyed by the change: the
// sources whose digest differs between the stamps, each at the resourceVersion the
// watcher holds it at (its new digest where it holds none: a digest depends on the keys
// a workload consumes, a version does not), so that every workload one change rolled
// shares one message. reason is its ConfigChanged Event's.
func (r *workloadReconciler) notifyRolled(ctx context.Context, obj client.Object, before, after, hash, reason string) {
	if r.notify == nil {
		return
	}
	now := stamp.ParseSources(after)
	var change, srcs []string
	for _, src := range stamp.ChangedSources(before, after) {
		at := "=" + now[src]
		if now[src] == "" {
			at = "=gone"
		} else if rv := r.seenAt(ctx, obj.GetNamespace(), src); rv != "" {
			at = "@" + rv
		}
		change, srcs = append(change, src+at), append(srcs, src)
	}
	if len(change) == 0 {
		// A restart onto the stamp it has, or no sources list: its own message.
		change = []string{"config-hash=" + stamp.ShortHash(hash)}
	}
	r.notify.Notify(notify.Event{Kind: notify.Rolled, Namespace: obj.GetNamespace(), Workload: r.kind.Kind + "/" + obj.GetName(),
		Change: strings.Join(change, ","), Sources: srcs, Reason: reason})
}

// seenAt is the resourceVersion at which the watcher holds src ("kind/name"); "" when
// it holds none.
func (r *workloadReconciler) seenAt(ctx context.Context, namespace, src string) string {
	kind, name, ok := strings.Cut(src, "/")
	if !ok || r.config == nil || r.config.Seen == nil {
		return ""
	}
	return r.config.Seen(ctx, kind, namespace, name)
}

// notifyHeld tells the notifier of a rollout held back (kind HeldMissing or HeldPaused);
// change tells one hold from another (reported once an hour).
func (r *workloadReconciler) notifyHeld(obj client.Object, kind notify.Kind, change, reason string) {
	if r.notify == nil {
		return
	}
	r.notify.Notify(notify.Event{Kind: kind, Namespace: obj.GetNamespace(), Workload: r.kind.Kind + "/" + obj.GetName(), Change: change, Reason: reason})
}
