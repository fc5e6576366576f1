package watcher

import (
	"context"
	"fmt"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/notify"
	"github.com/configstamp/configstamp/stamp"
)

// notifyRolled tells the notifier of a rollout a nudge caused (a restamp, for a kind
// without pods of its own), keyed by the change (changeOf), so that every workload one
// change rolled shares one message. reason is its ConfigChanged Event's.
func (r *workloadReconciler) notifyRolled(ctx context.Context, obj client.Object, before, after, hash, reason string) {
	if r.notify == nil {
		return
	}
	r.notify.Notify(r.rolledEvent(ctx, obj, before, after, hash, reason))
}

// rolledEvent is notifyRolled's event.
func (r *workloadReconciler) rolledEvent(ctx context.Context, obj client.Object, before, after, hash, reason string) notify.Event {
	change, srcs := r.changeOf(ctx, obj.GetNamespace(), before, after, hash)
	kind := notify.Rolled
	if r.kind.NoPods() {
		kind = notify.Restamped
	}
	return notify.Event{Kind: kind, Namespace: obj.GetNamespace(), Workload: r.kind.Kind + "/" + obj.GetName(),
		Change: change, Sources: srcs, Reason: reason}
}

// changeOf names the change from the stamp with sources annotation before to the one
// with after (config hash hash): the sources whose digest differs, each at the
// resourceVersion the watcher holds it at (its new digest where it holds none: a digest
// depends on the keys a workload consumes, a version does not). Without such sources
// (a restart onto the stamp it has, or no sources list), the config hash.
func (r *workloadReconciler) changeOf(ctx context.Context, namespace, before, after, hash string) (string, []string) {
	now := stamp.ParseSources(after)
	var change, srcs []string
	for _, src := range stamp.ChangedSources(before, after) {
		at := "=" + now[src]
		if now[src] == "" {
			at = "=gone"
		} else if rv := r.seenAt(ctx, namespace, src); rv != "" {
			at = "@" + rv
		}
		change, srcs = append(change, src+at), append(srcs, src)
	}
	if len(change) == 0 {
		return "config-hash=" + stamp.ShortHash(hash), nil
	}
	return strings.Join(change, ","), srcs
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

// notifyHeld tells the notifier of a rollout held back (kind HeldMissing or HeldPaused)
// or a bypass; change tells one hold from another (reported once an hour), and batches
// the workloads it holds.
func (r *workloadReconciler) notifyHeld(obj client.Object, kind notify.Kind, change, reason string) {
	if r.notify == nil {
		return
	}
	r.notify.Notify(notify.Event{Kind: kind, Namespace: obj.GetNamespace(), Workload: r.kind.Kind + "/" + obj.GetName(), Change: change, Reason: reason})
}

// notifyPaused tells the notifier of a paused workload's rollout held back, keyed by
// the change (changeOf) like a rollout: one change of config many paused workloads
// consume is one message.
func (r *workloadReconciler) notifyPaused(ctx context.Context, j judged) {
	if r.notify == nil {
		return
	}
	change, _ := r.changeOf(ctx, j.obj.GetNamespace(), j.storedSources, j.want.SourcesAnnotation(), j.want.Hash)
	r.notifyHeld(j.obj, notify.HeldPaused, change, fmt.Sprintf("config changed (config hash %s -> %s)", stamp.ShortHash(j.basis), stamp.ShortHash(j.want.Hash)))
}
