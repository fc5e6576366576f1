package watcher

import (
	"context"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/internal/notify"
	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// Event reasons recorded on workloads.
const (
	ReasonConfigChanged = "ConfigChanged"
	ReasonStampBypassed = "StampBypassed"
	ReasonConfigMissing = "ConfigMissing"
	ReasonStampTooLarge = "StampTooLarge"
	// ReasonRolloutPaused: its config changed while it is paused; held, and rolled
	// when it is resumed.
	ReasonRolloutPaused = "RolloutPaused"
	// ReasonTooManySources: it consumes more sources than --max-sources; left as stamped.
	ReasonTooManySources = "TooManySources"
	// ReasonConfigUnreadable: nudges the webhook answered without a stamp, unable to
	// read config; still retried.
	ReasonConfigUnreadable = "ConfigUnreadable"
	// ReasonHashKeyMismatch: the replicas have not agreed on the hash key for
	// maxBypassRetries checks (a record or a nudge under another key); still retried.
	ReasonHashKeyMismatch = "HashKeyMismatch"
	// ReasonConfigReadTimeout: the watcher's own reads of its config ran past
	// --read-timeout at every retry; tried again at its next event or re-check.
	ReasonConfigReadTimeout = "ConfigReadTimeout"
)

// workloadReconciler checks one workload's config against the evidence of the config its
// pods run (its stamp, or its record) and, when they differ, either rolls it through the
// webhook (a nudge) or, when its pods already run the current config, records that. One
// runs per kind.
type workloadReconciler struct {
	kind   *workload.Kind
	client client.Client // cached reads (not of workloads), direct writes
	// workloads are the kind's workloads as the cache holds them.
	workloads *workloadStore
	live      client.Reader // live workload reads
	recorder  recorder.EventRecorder
	// config computes stamps from live reads of the sources.
	config *configread.Reader
	// freshKey reads the hash key again unless it was read a moment ago, and reports
	// whether config's key is fresh (hashkey.Keeper.Fresh); nil: taken as it is.
	freshKey func(ctx context.Context, since time.Time) bool
	sources  stamp.Options
	scope    *scope.Scope
	evidence *evidence
	// rollStale rolls unstamped workloads that predate configstamp when their config was
	// written after their pods started; off by default: installing rolls nothing.
	rollStale bool
	// minInterval is the least time between two rollouts of one workload by configstamp.
	minInterval time.Duration
	// pending reports a source (kind, key) still waiting to be quiet: its dependents are
	// checked when it is, not before (a burst ends in one rollout).
	pending func(kind string, key types.NamespacedName) bool

	// recheck: the periodic re-check runs (RecheckInterval): checks keep what it compares.
	recheck bool
	// admissions bounds the writes through the webhook in flight (shared by every kind;
	// nil: unbounded, unit tests).
	admissions *semaphore.Weighted
	// notify receives what the watcher did (nil: notifications off).
	notify *notify.Notifier
	// webhookReady: Options.WebhookReady.
	webhookReady <-chan struct{}
	// checks counts the checks begun and re-check passes, for the releaser (nil: not
	// counted).
	checks *atomic.Uint64
	// waves is the gate of changes rolling in waves (nil: none; unit tests).
	waves *wavesGate

	// state is what is kept of each workload between checks; the workloads' events,
	// their namespaces' events and the sources' hand-offs share it.
	state workloadStates
}

// throughWebhook makes a write that the webhook admits (a nudge, a record) in one of the
// watcher's admission slots: however many workers check at once, it never takes more of
// a webhook replica's --webhook-max-in-flight than its share.
func (r *workloadReconciler) throughWebhook(ctx context.Context, write func() error) error {
	if r.webhookReady != nil {
		select {
		case <-r.webhookReady:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if r.admissions != nil {
		if err := r.admissions.Acquire(ctx, 1); err != nil {
			return err
		}
		defer r.admissions.Release(1)
	}
	return write()
}
