// Package watcher is configstamp's ConfigMap watcher: when a consumed ConfigMap changes,
// it nudges the Deployments that consume it, so the change flows through the webhook,
// and it heals stamps the webhook missed.
package watcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/internal/scope"
)

// Options configure the watcher.
type Options struct {
	// Debounce is how long a ConfigMap must be quiet before its dependents are checked.
	Debounce time.Duration
	// DebounceMax caps the wait from the first event of a burst.
	DebounceMax time.Duration
	// ReadTimeout bounds the live ConfigMap reads of one check.
	ReadTimeout time.Duration
	// Concurrency is how many Deployments are checked and nudged at once.
	Concurrency int
	// RetryBase and RetryMax bound the exponential backoff of a failed check or a
	// stamp that bypassed the webhook.
	RetryBase, RetryMax time.Duration
	// Scope is where the registration sends admissions; the watcher acts nowhere else.
	Scope *scope.Scope
	// Registration is the name of the MutatingWebhookConfiguration: a workload created
	// after it should have been stamped at creation.
	Registration string
	// MinRolloutInterval is the least time between two rollouts of one workload caused
	// by configstamp (a flapping writer); the latest content always lands.
	MinRolloutInterval time.Duration
	// RollStaleAtInstall rolls unstamped workloads that predate configstamp when their
	// config was written after their pods started. Off: installing rolls nothing.
	RollStaleAtInstall bool
	// Cache of source digests shared with the webhook (optional).
	Cache *configread.DigestCache
}

// Defaults for Options.
const (
	DefaultDebounce           = 2 * time.Second
	DefaultDebounceMax        = 30 * time.Second
	DefaultConcurrency        = 4
	DefaultMinRolloutInterval = 10 * time.Second
)

func (o *Options) defaults() {
	if o.DebounceMax == 0 {
		o.DebounceMax = DefaultDebounceMax
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = 5 * time.Second
	}
	if o.RetryBase == 0 {
		o.RetryBase = 500 * time.Millisecond
	}
	if o.RetryMax == 0 {
		o.RetryMax = 30 * time.Second
	}
	if o.Registration == "" {
		o.Registration = "configstamp"
	}
}

// SetupWithManager registers the field index and both controllers. They run on the
// leader only.
func SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	opts.defaults()
	if opts.Scope == nil {
		return errors.New("watcher: no scope")
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &appsv1.Deployment{}, ConfigMapIndex, indexConfigMaps); err != nil {
		return fmt.Errorf("index deployments by configmap: %w", err)
	}
	tr := &triggers{}
	debounce := newDebouncer[types.NamespacedName](opts.Debounce, opts.DebounceMax)
	dependents := make(chan event.GenericEvent, 1024)
	deps := &deploymentReconciler{
		client: mgr.GetClient(), live: mgr.GetAPIReader(), recorder: mgr.GetEventRecorder("configstamp"),
		readTimeout: opts.ReadTimeout, scope: opts.Scope, cache: opts.Cache, triggers: tr,
		evidence:  &evidence{cache: mgr.GetClient(), live: mgr.GetAPIReader(), registration: opts.Registration},
		rollStale: opts.RollStaleAtInstall, minInterval: opts.MinRolloutInterval, pending: debounce.pending,
	}
	err := ctrl.NewControllerManagedBy(mgr).
		Named("deployment").
		Watches(&appsv1.Deployment{}, deps.events(opts.Debounce)).
		WatchesRawSource(source.Channel(dependents, &handler.EnqueueRequestForObject{})).
		WatchesMetadata(&corev1.Namespace{}, namespaceEvents(opts.Scope, mgr.GetClient(), tr)).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: opts.Concurrency,
			RateLimiter:             workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](opts.RetryBase, opts.RetryMax),
		}).
		Complete(deps)
	if err != nil {
		return fmt.Errorf("set up deployment controller: %w", err)
	}

	server, _, err := rest.DefaultServerUrlFor(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("API server URL: %w", err)
	}
	cms := &configMapReconciler{
		client: mgr.GetClient(), debounce: debounce,
		quiet: opts.Debounce, dependents: dependents, triggers: tr, scope: opts.Scope,
		replay: &replayWindow{serverNow: serverClock(mgr.GetHTTPClient(), server.String())},
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("configmap").
		WatchesMetadata(&corev1.ConfigMap{}, cms.events()).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}).
		Complete(cms)
	if err != nil {
		return fmt.Errorf("set up configmap controller: %w", err)
	}
	return nil
}
