// Package watcher is configstamp's source watcher: when a consumed ConfigMap or Secret
// changes, it nudges the workloads that consume it, so the change flows through the
// webhook, and it heals stamps the webhook missed.
package watcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/internal/decide"
	"github.com/configstamp/configstamp/internal/flux"
	"github.com/configstamp/configstamp/internal/notify"
	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/waves"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// Options configure the watcher.
type Options struct {
	// Debounce is how long a source must be quiet before its dependents are checked.
	Debounce time.Duration
	// DebounceMax caps the wait from the first event of a burst.
	DebounceMax time.Duration
	// ReadTimeout bounds the live source reads of one check.
	ReadTimeout time.Duration
	// Concurrency is how many workloads of each kind are checked and nudged at once.
	Concurrency int
	// MaxAdmissionsInFlight bounds the watcher's writes that go through the webhook
	// (nudges, records) in flight at once, all kinds together: below one webhook
	// replica's --webhook-max-in-flight, so that the Service may send them all to one
	// replica and users' admissions still find slots there (default
	// DefaultMaxAdmissionsInFlight).
	MaxAdmissionsInFlight int
	// RetryBase and RetryMax bound the exponential backoff of a failed check or a
	// stamp that bypassed the webhook.
	RetryBase, RetryMax time.Duration
	// Scope is where the registration sends admissions; the watcher acts nowhere else.
	Scope *scope.Scope
	// Registration is the name of the MutatingWebhookConfiguration: it records since
	// when each kind has been stamped (a workload created after that should have been
	// stamped at creation).
	Registration string
	// CoverageConfigMap keeps that record instead in a namespaced install
	// (Scope.Namespaced), which may read nothing cluster-wide: a ConfigMap the chart
	// creates with the registration.
	CoverageConfigMap client.ObjectKey
	// MinRolloutInterval is the least time between two rollouts of one workload caused
	// by configstamp (a flapping writer); the latest content always lands.
	MinRolloutInterval time.Duration
	// RecheckInterval is how often the leader checks again the workloads something they
	// depend on moved for since their last check (0: never).
	RecheckInterval time.Duration
	// RollStaleAtInstall rolls unstamped workloads that predate configstamp when their
	// config was written after their pods started. Off: installing rolls nothing.
	RollStaleAtInstall bool
	// Cache of source digests shared with the webhook (optional).
	Cache *configread.DigestCache
	// Kinds are the workload kinds watched from the start (default: workload.Builtin()).
	Kinds []*workload.Kind
	// ArgoRollouts also watches Argo Rollouts, once their CRD exists.
	ArgoRollouts bool
	// FluxHelmReleases also watches Flux HelmReleases, once their CRD exists, and
	// requests a reconcile of one when the values it takes from ConfigMaps (and
	// Secrets) change.
	FluxHelmReleases bool
	// Sources says which sources count; Key returns the installation's hash key, under
	// which every digest is keyed (required).
	Sources stamp.Options
	Key     func() []byte
	// FreshKey reads the key again, rate-limited (hashkey.Keeper.Fresh); nil: never.
	FreshKey func(ctx context.Context, since time.Time) bool
	// Waves are the cluster's settings of health-gated waves (off by default; a source's
	// annotation, its namespace's or its namespace's label may turn them on).
	// WavesDeadline bounds how long a rolled workload of a kind without a deadline of
	// its own (a Deployment's progressDeadlineSeconds) may take to become available
	// before its wave fails.
	Waves         waves.Settings
	WavesDeadline time.Duration
	// Notify receives what the watcher did (rollouts, held changes, bypasses); nil:
	// notifications off.
	Notify *notify.Notifier
	// WebhookReady, when set, is closed once writes of workloads reach the webhook (dev
	// mode: its registration applied and settled); no write through the webhook is sent
	// before. nil: at once.
	WebhookReady <-chan struct{}
}

// Defaults for Options.
const (
	DefaultDebounce    = 2 * time.Second
	DefaultDebounceMax = 30 * time.Second
	DefaultConcurrency = 4
	// DefaultMaxAdmissionsInFlight is half the webhook's default slots per replica
	// (webhook.DefaultMaxInFlight).
	DefaultMaxAdmissionsInFlight = 4
	DefaultMinRolloutInterval    = 10 * time.Second
	DefaultRecheckInterval       = 10 * time.Minute
)

func (o *Options) defaults() {
	if o.DebounceMax == 0 {
		o.DebounceMax = DefaultDebounceMax
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.MaxAdmissionsInFlight <= 0 {
		o.MaxAdmissionsInFlight = DefaultMaxAdmissionsInFlight
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
	if len(o.Kinds) == 0 {
		o.Kinds = workload.Builtin()
	}
	if o.WavesDeadline == 0 {
		o.WavesDeadline = 10 * time.Minute
	}
	if len(o.Waves.Steps) == 0 {
		o.Waves.Steps, _ = waves.ParseSteps(waves.DefaultSteps)
	}
}

// SetupWithManager registers the source indexes and the controllers: one per workload
// kind, one per source kind. They run on the leader only. With ArgoRollouts, Rollouts
// are watched once their CRD exists (at start, or when it appears later).
func SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	opts.defaults()
	if opts.Scope == nil {
		return errors.New("watcher: no scope")
	}
	sourceKinds, err := counted(opts)
	if err != nil {
		return err
	}
	server, _, err := rest.DefaultServerUrlFor(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("API server URL: %w", err)
	}
	clock := serverClock(mgr.GetHTTPClient(), server.String())
	record := registrationRecord(opts.Registration)
	if opts.Scope.Namespaced() {
		if opts.CoverageConfigMap.Name == "" || opts.CoverageConfigMap.Namespace == "" {
			return errors.New("watcher: a namespaced scope without a coverage ConfigMap")
		}
		record = configMapRecord(opts.CoverageConfigMap)
	}
	cov := newCoverage(mgr.GetAPIReader(), mgr.GetClient(), record, clock)
	w := &watcher{mgr: mgr, opts: opts, sources: map[string]*sourceReconciler{}, coverage: cov,
		admissions: semaphore.NewWeighted(int64(opts.MaxAdmissionsInFlight))}
	w.waves = &wavesGate{cluster: opts.Waves, deadline: opts.WavesDeadline, cache: mgr.GetClient(), live: mgr.GetAPIReader(),
		key: opts.Key, sources: opts.Sources, kinds: w.watchedKinds, scope: opts.Scope, recorder: mgr.GetEventRecorder("configstamp"),
		lookups: &w.lookups}
	if opts.Notify != nil {
		w.waves.notify = opts.Notify.Notify
	}
	w.waves.wake = func(ctx context.Context, kind string, key types.NamespacedName) {
		if src := w.sources[kind]; src != nil {
			if _, err := src.fanOut(ctx, reconcile.Request{NamespacedName: key}, true); err != nil {
				logf.FromContext(ctx).Info("Could not wake the consumers of a change rolling in waves: they are checked within a minute", "source", kind+"/"+key.Name, "error", err.Error())
			}
		}
	}
	replay := &replayWindow{serverNow: clock}
	for _, k := range sourceKinds {
		kind := k.Name
		debounce := newDebouncer[types.NamespacedName](opts.Debounce, opts.DebounceMax)
		debounce.gauge = debouncePending.WithLabelValues(kind)
		burstAge.set(kind, debounce.oldest)
		w.sources[kind] = &sourceReconciler{
			kind: kind, client: mgr.GetClient(), debounce: debounce, quiet: opts.Debounce, replay: replay, scope: opts.Scope,
			follow: w.waves.follow,
		}
	}
	covered := []string{}
	for _, k := range opts.Kinds {
		// A CreateOnly kind (Jobs) is stamped at CREATE alone: covered (explain reads
		// since when), never watched.
		if !k.CreateOnly() {
			if err := w.setupKind(ctx, k); err != nil {
				return err
			}
		}
		covered = append(covered, k.Resource)
	}
	for _, k := range sourceKinds {
		if k.Coverage != "" {
			covered = append(covered, k.Coverage)
		}
	}
	for _, ns := range opts.Scope.Watched {
		covered = append(covered, decide.CoverageNamespace(ns))
	}
	covered = append(covered, decide.CoverageScope(opts.Scope.Label, opts.Scope.Excluded))
	// The leader keeps the registration's coverage entries (a kind detected later is
	// added when it is set up).
	cov.cover(covered...)
	if err := mgr.Add(cov); err != nil {
		return err
	}
	if err := mgr.Add(newReleaser(&w.checks)); err != nil {
		return err
	}
	var detect []*kindDetector
	for _, k := range sourceKinds {
		if k.Group == "" {
			if err := w.setupSource(k); err != nil {
				return err
			}
			continue
		}
		// A kind served by a CRD is watched once the CRD is there, detected as Rollouts are.
		detect = append(detect, w.sourceDetector(k))
	}
	if opts.ArgoRollouts {
		detect = append(detect, &kindDetector{kind: workload.Rollout.Kind, gvr: workload.Rollout.GVR(), setup: func(ctx context.Context) error {
			if err := w.setupKind(ctx, workload.Rollout); err != nil {
				return err
			}
			cov.cover(workload.Rollout.Resource)
			return nil
		}})
	}
	if opts.FluxHelmReleases {
		detect = append(detect, &kindDetector{kind: flux.Kind, gvr: flux.HelmRelease, setup: w.setupHelmReleases})
	}
	if len(detect) == 0 {
		return nil
	}
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	for _, d := range detect {
		d.discovery = dc
		if err := mgr.Add(d); err != nil {
			return err
		}
	}
	return nil
}

// sourceDetector sets up the controller of k, a source kind served by a CRD, once the
// API server serves it and its Statuses.
func (w *watcher) sourceDetector(k *stamp.SourceKind) *kindDetector {
	d := &kindDetector{kind: k.Name, gvr: k.GVK().GroupVersion().WithResource(k.Resource),
		setup: func(context.Context) error { return w.setupSource(k) }}
	if k.Statuses != "" {
		d.also = []string{k.Statuses}
	}
	return d
}

// setupSource starts the controller of one source kind: metadata-only events of its
// objects, and for a kind whose content is in status objects (the CSI driver's), the
// events of those that record a change.
func (w *watcher) setupSource(k *stamp.SourceKind) error {
	mgr, src := w.mgr, w.sources[k.Name]
	b := ctrl.NewControllerManagedBy(mgr).
		Named(k.Name).
		WatchesMetadata(k.New(), src.events())
	if k.Statuses != "" {
		b = b.Watches(statusObject(k), src.statusEvents())
	}
	err := b.WithOptions(controller.Options{MaxConcurrentReconciles: 2, NewQueue: func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		return newFairQueue(name, rl, mgr.GetLogger().WithValues("controller", name))
	}}).Complete(src)
	if err != nil {
		return fmt.Errorf("set up %s controller: %w", k.Name, err)
	}
	return nil
}

// counted are the source kinds that count under opts.Sources; every digest needs
// opts.Key.
func counted(opts Options) ([]*stamp.SourceKind, error) {
	if opts.Key == nil {
		return nil, errors.New("watcher: no hash key")
	}
	var out []*stamp.SourceKind
	for _, k := range stamp.SourceKinds() {
		if k.Counts(opts.Sources) {
			out = append(out, k)
		}
	}
	return out, nil
}

// watcher sets up the controllers of the workload kinds.
type watcher struct {
	mgr      ctrl.Manager
	opts     Options
	sources  map[string]*sourceReconciler
	coverage *coverage
	// lookups are the workload kinds' source index lookups (the waves gate's).
	lookups consumerLookups
	// admissions are the slots of the watcher's writes through the webhook, shared by
	// every kind (Options.MaxAdmissionsInFlight).
	admissions *semaphore.Weighted
	waves      *wavesGate
	// checks counts the checks begun and re-check passes, for the releaser.
	checks atomic.Uint64
	// watched are the workload kinds set up so far (a CRD's kind may come later).
	mu      sync.Mutex
	watched []*workload.Kind
}

// watchedKinds are the workload kinds set up so far.
func (w *watcher) watchedKinds() []*workload.Kind {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.watched)
}

// pending reports whether a source is in a burst (or handing its dependents on).
func (w *watcher) pending(kind string, key types.NamespacedName) bool {
	src := w.sources[kind]
	return src != nil && src.debounce.pending(key)
}

// waiting reports whether a source is in a burst still waiting to be quiet (its
// dependents are handed on when it is).
func (w *watcher) waiting(kind string, key types.NamespacedName) bool {
	src := w.sources[kind]
	return src != nil && src.debounce.waiting(key)
}

// seen is the resourceVersion at which the watcher's metadata cache holds a source ("" for
// a kind it does not watch, which must not start an informer, or one it does not hold).
func (w *watcher) seen(ctx context.Context, kind, namespace, name string) string {
	if w.sources[kind] == nil {
		return ""
	}
	meta := configread.NewMeta(kind)
	if err := w.mgr.GetClient().Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, meta); err != nil {
		return ""
	}
	return meta.ResourceVersion
}

// setupKind indexes the workloads of one kind by the sources they consume and starts
// their controller, which the source controllers then feed.
func (w *watcher) setupKind(ctx context.Context, k *workload.Kind) error {
	mgr, opts := w.mgr, w.opts
	consumers, store, err := addSourceIndex(ctx, mgr.GetCache(), k, opts.Sources)
	if err != nil {
		return fmt.Errorf("index %s by source: %w", k.Resource, err)
	}
	w.lookups.set(k, consumers)
	// Sources hand their dependents straight to this queue: unbounded, deduplicating,
	// fair across namespaces; an add never blocks.
	name := strings.ToLower(k.Kind)
	queue := newFairQueue(name, workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](opts.RetryBase, opts.RetryMax),
		mgr.GetLogger().WithValues("controller", name))
	rec := &workloadReconciler{
		kind: k, client: mgr.GetClient(), workloads: store, live: mgr.GetAPIReader(), recorder: mgr.GetEventRecorder("configstamp"),
		config:   &configread.Reader{Client: mgr.GetAPIReader(), Cache: opts.Cache, Key: opts.Key, Timeout: opts.ReadTimeout, Seen: w.seen, KeyDigests: true},
		freshKey: opts.FreshKey, sources: opts.Sources, scope: opts.Scope,
		evidence:  &evidence{cache: mgr.GetClient(), live: mgr.GetAPIReader(), scope: opts.Scope, coverage: w.coverage},
		rollStale: opts.RollStaleAtInstall, minInterval: opts.MinRolloutInterval, pending: w.pending,
		recheck: opts.RecheckInterval > 0, admissions: w.admissions, notify: opts.Notify, waves: w.waves, webhookReady: opts.WebhookReady,
		checks: &w.checks,
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named(name).
		Watches(k.New(), rec.events(opts.Debounce))
	if !opts.Scope.Namespaced() {
		// A namespace that opts in; a namespaced install watches no Namespace.
		b = b.WatchesMetadata(&corev1.Namespace{}, namespaceEvents(opts.Scope, mgr.GetClient(), dependentsOf{
			name: k.Kind, newList: k.NewList, items: k.Items, list: store.list,
			hand: func(key types.NamespacedName, _ bool) { rec.state.addTrigger(key, trigger{}) },
		}))
	}
	err = b.WithOptions(controller.Options{
		MaxConcurrentReconciles: opts.Concurrency,
		NewQueue:                queue.newQueue,
	}).Complete(rec)
	if err != nil {
		return fmt.Errorf("set up %s controller: %w", k.Resource, err)
	}
	for _, src := range w.sources {
		src.addDependents(workloadDependents(k, consumers, queue, &rec.state))
	}
	w.mu.Lock()
	w.watched = append(w.watched, k)
	w.mu.Unlock()
	recheckQueued.WithLabelValues(k.Kind)
	recheckFound.WithLabelValues(k.Kind)
	if opts.RecheckInterval > 0 {
		return mgr.Add(&recheck{rec: rec, queue: queue, interval: opts.RecheckInterval})
	}
	return nil
}
