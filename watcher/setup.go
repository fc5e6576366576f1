// Package watcher is configstamp's ConfigMap watcher: when a consumed ConfigMap changes,
// it nudges the Deployments that consume it, so the change flows through the webhook,
// and it heals stamps the webhook missed.
package watcher

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/stamp"
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
	// NamespaceLabel is the label (value "enabled") that opts a namespace in; it must
	// match the registration's namespaceSelector. Default configstamp.io/inject.
	NamespaceLabel string
	// Cache of source digests shared with the webhook (optional).
	Cache *configread.DigestCache
}

// startupMargin widens "written since configstamp started" for ConfigMaps in the
// informer's initial list, to allow for clock skew between configstamp and the API server.
const startupMargin = time.Minute

// Defaults for Options.
const (
	DefaultDebounce    = 2 * time.Second
	DefaultDebounceMax = 30 * time.Second
	DefaultConcurrency = 4
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
	if o.NamespaceLabel == "" {
		o.NamespaceLabel = stamp.InjectLabel
	}
}

// SetupWithManager registers the field index and both controllers. They run on the
// leader only.
func SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	opts.defaults()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &appsv1.Deployment{}, ConfigMapIndex, indexConfigMaps); err != nil {
		return fmt.Errorf("index deployments by configmap: %w", err)
	}
	adopt := &keySet{}
	dependents := make(chan event.GenericEvent, 1024)
	deps := &deploymentReconciler{
		client: mgr.GetClient(), live: mgr.GetAPIReader(), recorder: mgr.GetEventRecorder("configstamp"),
		readTimeout: opts.ReadTimeout, adopt: adopt, namespaceLabel: opts.NamespaceLabel, cache: opts.Cache,
	}
	err := ctrl.NewControllerManagedBy(mgr).
		Named("deployment").
		Watches(&appsv1.Deployment{}, deps.events(opts.Debounce)).
		WatchesRawSource(source.Channel(dependents, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: opts.Concurrency,
			RateLimiter:             workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](opts.RetryBase, opts.RetryMax),
		}).
		Complete(deps)
	if err != nil {
		return fmt.Errorf("set up deployment controller: %w", err)
	}

	cms := &configMapReconciler{
		client: mgr.GetClient(), debounce: newDebouncer[types.NamespacedName](opts.Debounce, opts.DebounceMax),
		quiet: opts.Debounce, dependents: dependents, adopt: adopt,
		recentSince: time.Now().Add(-startupMargin), namespaceLabel: opts.NamespaceLabel,
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
