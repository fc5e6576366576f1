package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/configstamp/configstamp/certs"
	"github.com/configstamp/configstamp/internal/argo"
	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/internal/flux"
	"github.com/configstamp/configstamp/internal/hashkey"
	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/watcher"
	"github.com/configstamp/configstamp/webhook"
)

// digestCacheSize is the default bound of the digest cache of every role
// (--digest-cache-entries): about 600 bytes an entry with per-key digests (about 10 MiB
// full, BENCHMARKS.md). A review or check whose source has no entry reads its whole
// content (up to 1 MiB) instead of its metadata, so the bound must hold what a fan-out
// or rollout storm re-reads: an LRU smaller than the sources swept misses every one.
// The webhook role keeps the same bound: the watcher's nudges and records are reviewed
// there, each re-reading the workload's sources.
const digestCacheSize = 16384

// newDigestCache is the digest cache of a process, whatever its role.
func newDigestCache(entries int) *configread.DigestCache {
	return configread.NewDigestCache(entries)
}

// fieldOwner is the field manager of configstamp's writes (nudges, records, the
// registration's caBundle and coverage) in every role: the API server would otherwise
// take it from the user agent, which names the role.
const fieldOwner = "configstamp"

// devRegistrationSettle is how long dev mode waits, after applying its registration,
// before its watcher writes: API servers pick a registration up through their watches,
// as they do a caBundle (--ca-switch-delay).
const devRegistrationSettle = 2 * time.Second

// setup is what run's steps share.
type setup struct {
	o       *options
	log     logr.Logger
	scope   *scope.Scope
	kinds   []*workload.Kind
	sources stamp.Options
	cfg     *rest.Config
	scheme  *runtime.Scheme
	// registrationName is the registration configstamp reads (coverage) and, in dev
	// mode, writes.
	registrationName string
	// direct is one uncached client for the few direct reads and writes (the permission
	// check, the certificate mode, the hash key Secret, dev mode's registration): never a
	// cache of Secrets.
	direct client.Client
	// devRegistered, in dev mode with the watcher in the same process, is closed once
	// its registration is applied and settled (webhook.Registrar.Ready): the watcher
	// writes nothing before, or the API server would let its writes bypass the webhook.
	devRegistered chan struct{}
}

// newSetup reads what every step needs: the scope, the kinds and the client config.
func newSetup(o *options) (*setup, error) {
	s := &setup{o: o, log: ctrl.Log.WithName("setup"), sources: stamp.Options{Secrets: o.secrets, CSISecrets: o.csiSecrets, MaxSources: o.bounds.maxSources}, registrationName: o.registrationName}
	var err error
	if s.scope, err = scope.NewWatched(o.namespaceLabel, strings.Split(o.excludeNamespaces, ","), o.watched()); err != nil {
		return nil, err
	}
	s.kinds = workload.Builtin()
	if o.argoRollouts {
		s.kinds = append(s.kinds, workload.Rollout)
	}
	if s.cfg, err = ctrl.GetConfig(); err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	s.cfg.QPS, s.cfg.Burst = float32(o.qps), o.burst
	// Each role's requests tell apart in the audit log (both run as one identity: the
	// webhook honours the nudges and records of its own user only).
	s.cfg.UserAgent = "configstamp"
	if o.role != roleAll {
		s.cfg.UserAgent = "configstamp-" + o.role
	}
	// The webhook's warnings on the watcher's nudges tell why one was not stamped.
	s.cfg.WarningHandler, s.cfg.WarningHandlerWithContext = nil, watcher.WarningHandler()
	if o.devWebhookURL != "" {
		s.registrationName = o.devRegistrationName
	}
	return s, nil
}

// devRegistration is, with --dev-webhook-url, the registration dev mode writes, its
// serving certificate made (in a temporary cert dir unless one is named, removed by
// cleanup); nil otherwise. cleanup is never nil.
func (s *setup) devRegistration() (_ *admissionregistrationv1.MutatingWebhookConfiguration, cleanup func(), _ error) {
	o := s.o
	cleanup = func() {}
	if o.devWebhookURL == "" {
		return nil, cleanup, nil
	}
	u, err := url.Parse(o.devWebhookURL)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" {
		return nil, cleanup, fmt.Errorf("--dev-webhook-url %q: want https://HOST[:PORT]", o.devWebhookURL)
	}
	if o.webhookCertDir == "" {
		if o.webhookCertDir, err = os.MkdirTemp("", "configstamp-certs-"); err != nil {
			return nil, cleanup, fmt.Errorf("create cert dir: %w", err)
		}
		dir := o.webhookCertDir
		cleanup = func() { _ = os.RemoveAll(dir) }
	}
	ca, err := certs.EnsureSelfSigned(o.webhookCertDir, u.Hostname(), "localhost", "127.0.0.1")
	if err != nil {
		return nil, cleanup, err
	}
	u.Path = ""
	registration := webhook.Registration(admissionregistrationv1.WebhookClientConfig{URL: new(u.String()), CABundle: ca}, s.scope, s.kinds)
	registration.Name = s.registrationName
	s.log.Info("Using a self-signed serving certificate", "dir", o.webhookCertDir, "url", u.String())
	return registration, cleanup, nil
}

// connect makes the scheme and the direct client.
func (s *setup) connect() error {
	s.scheme = runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s.scheme); err != nil {
		return err
	}
	if err := argo.AddToScheme(s.scheme); err != nil {
		return err
	}
	if err := flux.AddToScheme(s.scheme); err != nil {
		return err
	}
	var err error
	if s.direct, err = client.New(s.cfg, client.Options{Scheme: s.scheme, FieldOwner: fieldOwner}); err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	return nil
}

// checkAccess fails start-up with the missing permissions named rather than serve
// admission with a watcher whose caches never sync. It checks what the role needs.
func (s *setup) checkAccess(ctx context.Context) error {
	o := s.o
	keyRef, _ := hashkey.ParseRef(o.hashKey)
	want := needed(s.kinds, s.sources, o.metricsSecure, s.registrationName, keyRef)
	switch {
	case !o.watches():
		want = neededByWebhook(s.sources, o.metricsSecure, s.scope.Watched, keyRef)
	case s.scope.Namespaced():
		want = neededIn(s.kinds, s.sources, o.metricsSecure, s.scope.Watched, s.coverageConfigMap(), keyRef)
	}
	if o.watches() && o.fluxHelmReleases {
		want = append(want, helmReleaseAccess(s.scope.Watched)...)
	}
	if o.watches() {
		want = append(want, o.notify.access()...)
	}
	if o.certs.enabled() {
		// Both certificate modes keep the registration's caBundle (a JSON patch), watching
		// it by name.
		for _, verb := range []string{"get", "list", "watch", "patch"} {
			want = append(want, access{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", verb, s.registrationName, ""})
		}
		want = append(want, o.certs.secretAccess()...)
	}
	missing, unchecked := checkAccess(ctx, s.direct, want)
	if missing != nil {
		return missing
	}
	if unchecked != nil {
		s.log.Error(unchecked, "Could not check configstamp's permissions; starting anyway")
	}
	return nil
}

// certificates is the certificate mode's keeper (nil: none), its first pass done: the
// webhook server needs its files before it starts. That is before the manager, which
// binds the probe address ensureFirst answers on meanwhile.
func (s *setup) certificates(ctx context.Context) (ensurer, error) {
	keeper, err := s.o.certs.keeper(s.cfg, s.direct, s.o.webhookCertDir, s.registrationName)
	if err != nil || keeper == nil {
		return nil, err
	}
	if err := ensureFirst(ctx, keeper, s.o.probeAddr); err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	return keeper, nil
}

func (s *setup) newManager() (ctrl.Manager, error) {
	o := s.o
	webhookTLSOpts := []func(*tls.Config){webhookTLS(o.enableHTTP2)}
	var watchCA manager.Runnable
	if o.webhookClientCA != "" {
		verify, watch, err := clientCA(o.webhookClientCA)
		if err != nil {
			return nil, err
		}
		webhookTLSOpts, watchCA = append(webhookTLSOpts, verify), watch
	}
	mgr, err := ctrl.NewManager(s.cfg, ctrl.Options{
		Scheme:                  s.scheme,
		Client:                  client.Options{FieldOwner: fieldOwner},
		Metrics:                 metricsOptions(o.metricsAddr, o.metricsSecure, o.enableHTTP2),
		HealthProbeBindAddress:  o.probeAddr,
		PprofBindAddress:        o.pprofAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        o.leaderElectionID,
		LeaderElectionNamespace: o.leaderElectionNamespace,
		// Release the lease on shutdown so a standby takes over at once.
		LeaderElectionReleaseOnCancel: true,
		WebhookServer: ctrlwebhook.NewServer(ctrlwebhook.Options{
			Host: o.webhookHost, Port: o.webhookPort, CertDir: o.webhookCertDir,
			TLSOpts: webhookTLSOpts,
		}),
		GracefulShutdownTimeout: new(10 * time.Second),
		Cache:                   s.cacheOptions(),
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	if watchCA != nil {
		if err := mgr.Add(watchCA); err != nil {
			return nil, err
		}
	}
	return mgr, nil
}

// cacheOptions are the manager's cache options. The watch caches keep only what
// configstamp reads: no last-applied copy of the whole object, and of managedFields only
// the latest write time. A namespaced install's: the watched namespaces only. Of a
// workload, only what the watcher reads (watcher.TrimWorkloads).
func (s *setup) cacheOptions() cache.Options {
	return cache.Options{DefaultTransform: watcher.TrimForCache(), DefaultNamespaces: cacheNamespaces(s.scope.Watched), ByObject: s.trimmedWorkloads()}
}

// trimmedWorkloads sets the transform of the watched builtin workload kinds' informers
// (Jobs are never cached). Not
// Rollouts': the cache needs a kind's REST mapping when it is made, and their CRD may
// come later; their cache keeps them whole (the watcher reads both forms alike).
// Compact (workload.Cached) only in a cache of all namespaces, whose informers expose
// the store the watcher then reads them from (TestCompactOnlyWhereTheStoreIsRead).
func (s *setup) trimmedWorkloads() map[client.Object]cache.ByObject {
	out := map[client.Object]cache.ByObject{}
	for _, k := range workload.Watched(workload.Builtin()) {
		out[k.New()] = cache.ByObject{Transform: watcher.TrimWorkloads(k, s.scope.Label, len(cacheNamespaces(s.scope.Watched)) == 0)}
	}
	return out
}

// setupControllers registers the webhook and the watcher, as the role has them, with mgr.
func (s *setup) setupControllers(ctx context.Context, mgr ctrl.Manager) error {
	o := s.o
	key, err := s.hashKey(ctx, mgr)
	if err != nil {
		return err
	}
	// Digests of unchanged ConfigMaps are remembered by resourceVersion, so a check
	// reads metadata only; bounded (digestCacheSize).
	digests := newDigestCache(o.bounds.digestCacheEntries)
	if o.serves() {
		if err := s.setupWebhook(ctx, mgr, key, digests); err != nil {
			return err
		}
	}
	if !o.watches() {
		return nil
	}
	notifier, err := o.notify.notifier(s.direct)
	if err != nil {
		return err
	}
	if notifier != nil {
		if err := mgr.Add(notifier); err != nil {
			return err
		}
		s.log.Info("Sending notifications", "format", o.notify.format)
	}
	return watcher.SetupWithManager(ctx, mgr, watcher.Options{
		Debounce: o.debounce, DebounceMax: o.debounceMax, ReadTimeout: o.readTimeout, Concurrency: o.concurrency,
		MaxAdmissionsInFlight: o.bounds.nudgesInFlight(),
		Scope:                 s.scope, Registration: s.registrationName, CoverageConfigMap: s.coverageConfigMap(), MinRolloutInterval: o.minRolloutInterval,
		Waves: o.waves, WavesDeadline: o.wavesDeadline,
		RollStaleAtInstall: o.rollStaleAtInstall, RecheckInterval: o.recheckInterval, Cache: digests,
		ArgoRollouts: o.argoRollouts, FluxHelmReleases: o.fluxHelmReleases, Sources: s.sources, Key: key.Key, FreshKey: key.Fresh, Notify: notifier,
		WebhookReady: s.devRegistered,
	})
}

// setupWebhook registers the admission webhook, with the metadata-only Namespace
// informer its scope check reads: the one informer of the webhook role.
func (s *setup) setupWebhook(ctx context.Context, mgr ctrl.Manager, key *hashkey.Keeper, digests *configread.DigestCache) error {
	o := s.o
	// Admission reads get a client and a budget of their own: they never wait behind
	// the watcher's reads, and a flood of reviews cannot spend the watcher's budget.
	admissionCfg := rest.CopyConfig(s.cfg)
	admissionCfg.QPS, admissionCfg.Burst = float32(o.bounds.webhookQPS), o.bounds.webhookBurst
	admissionReader, err := client.New(admissionCfg, client.Options{Scheme: s.scheme})
	if err != nil {
		return fmt.Errorf("create admission client: %w", err)
	}
	self, err := whoAmI(ctx, admissionCfg, s.scheme)
	if err != nil {
		s.log.Error(err, "Could not tell which user configstamp runs as (SelfSubjectReview); nudge and record markers of --watcher-user, or with none of any user, are honoured", "watcherUsers", o.watcherUsers)
	} else {
		s.log.Info("Running as", "user", self, "watcherUsers", o.watcherUsers)
	}
	// The builtin kinds' and (with --argo-rollouts) the Rollout path are served from the
	// start, whether or not the CRD exists yet: the API server calls only what exists.
	inScope, err := newAdmissionScope(ctx, mgr, s.scope)
	if err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("namespaces", inScope.ready); err != nil {
		return err
	}
	opts := webhook.Options{
		ReadTimeout: o.readTimeout, Reader: admissionReader, Cache: digests, Self: self, Watchers: o.watcherUsers,
		Kinds: s.kinds, Sources: s.sources, Key: key.Key, FreshKey: key.Fresh, InScope: inScope.InScope,
		MaxRequestBytes: o.bounds.maxRequestBytes, MaxInFlight: o.bounds.maxInFlight,
	}
	webhook.SetupWithManager(mgr, opts)
	return nil
}

// hashKey is the installation's key, under which every digest is keyed. Every replica
// needs it before it serves admission, and follows the Secret afterwards (a rotation),
// so that all replicas digest alike.
func (s *setup) hashKey(ctx context.Context, mgr ctrl.Manager) (*hashkey.Keeper, error) {
	ref, _ := hashkey.ParseRef(s.o.hashKey)
	keeper := &hashkey.Keeper{Client: s.direct, Ref: ref, Refresh: s.o.hashKeyRefresh}
	if err := keeper.Load(ctx); err != nil {
		return nil, fmt.Errorf("hash key: %w", err)
	}
	if err := mgr.Add(keeper); err != nil {
		return nil, err
	}
	s.log.Info("Loaded the hash key", "secret", ref.String(), "fingerprint", stamp.KeyFingerprint(keeper.Key()))
	return keeper, nil
}

// addRunnables adds the certificate keeper and dev mode's registrar (each when there is
// one) and the health checks to mgr.
func (s *setup) addRunnables(mgr ctrl.Manager, keeper ensurer, registration *admissionregistrationv1.MutatingWebhookConfiguration) error {
	if keeper != nil {
		if err := mgr.Add(keeper); err != nil {
			return err
		}
	}
	if registration != nil {
		if err := mgr.Add(&webhook.Registrar{Client: s.direct, Registration: registration, Started: mgr.GetWebhookServer().StartedChecker(), Keep: s.o.devKeepRegistration,
			Ready: s.devRegistered, Settle: devRegistrationSettle}); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if !s.o.serves() {
		// The watcher role has no webhook server (asking the manager for it would start one).
		return mgr.AddReadyzCheck("caches", cacheSynced(mgr.GetCache()))
	}
	return mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker())
}
