package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/configstamp/configstamp/certs"
	"github.com/configstamp/configstamp/internal/argo"
	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/internal/hashkey"
	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/watcher"
	"github.com/configstamp/configstamp/webhook"
)

// digestCacheSize bounds the digest cache: about 150 bytes an entry.
const digestCacheSize = 16384

type options struct {
	devWebhookURL           string
	devRegistrationName     string
	devKeepRegistration     bool
	metricsSecure           bool
	shutdownDelay           time.Duration
	webhookPort             int
	webhookHost             string
	webhookCertDir          string
	metricsAddr             string
	probeAddr               string
	pprofAddr               string
	leaderElect             bool
	leaderElectionNamespace string
	leaderElectionID        string
	debounce                time.Duration
	debounceMax             time.Duration
	readTimeout             time.Duration
	concurrency             int
	namespaceLabel          string
	excludeNamespaces       string
	minRolloutInterval      time.Duration
	rollStaleAtInstall      bool
	secrets                 bool
	secretHashKey           string
	argoRollouts            bool
	enableHTTP2             bool
	version                 bool
	registrationName        string
	certs                   certOptions
	qps                     float64
	burst                   int
	zap                     zap.Options
}

// parseFlags defines configstamp's flags on fs and parses args. run passes
// flag.CommandLine, where controller-runtime's config package has registered --kubeconfig.
func parseFlags(fs *flag.FlagSet, args []string) (*options, error) {
	o := &options{}
	fs.StringVar(&o.devWebhookURL, "dev-webhook-url", "", "Run against a cluster outside it (local use, tests): generate a CA and serving certificate, and register this URL (e.g. https://127.0.0.1:9443) in the MutatingWebhookConfiguration --dev-registration-name, deleted again on a clean exit. An installed chart's registration is never touched. Empty in a cluster, where the chart registers the webhook.")
	fs.StringVar(&o.devRegistrationName, "dev-registration-name", webhook.DevConfigurationName, "Dev mode: name of the MutatingWebhookConfiguration it creates (refused if one of that name exists that dev mode did not make).")
	fs.BoolVar(&o.devKeepRegistration, "dev-keep-registration", false, "Dev mode: leave the registration in place on exit (so that a restart behaves like an installed webhook's).")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", false, "Serve metrics over HTTPS (a self-generated certificate), each request authenticated (TokenReview) and authorized (SubjectAccessReview: get on the non-resource URL /metrics). Needs create of tokenreviews and subjectaccessreviews.")
	fs.DurationVar(&o.shutdownDelay, "shutdown-delay", 0, "On SIGTERM, report not ready and keep serving admission this long before stopping, so that API servers stop calling this replica first (longer than the cluster's endpoint propagation, a few seconds).")
	fs.IntVar(&o.webhookPort, "webhook-port", 9443, "Port the admission webhook server listens on.")
	fs.StringVar(&o.webhookHost, "webhook-host", "", "Address the admission webhook server binds to (empty: all).")
	fs.StringVar(&o.webhookCertDir, "webhook-cert-dir", "", "Directory holding tls.crt and tls.key for the webhook server; reloaded when they change. With --dev-webhook-url: reused if it also holds ca.crt, else a CA and certificate are generated into it (default: a fresh temporary directory). Default otherwise: /tmp/k8s-webhook-server/serving-certs.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus metrics endpoint; \"0\" disables it.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints; \"0\" disables them.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "0", "Address of the net/http/pprof endpoints; \"0\" disables them.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "Elect a leader so that only one replica runs the watcher; every replica serves admission.")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease (required out of cluster).")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "configstamp-watcher", "Name of the leader election Lease.")
	fs.DurationVar(&o.debounce, "debounce", watcher.DefaultDebounce, "How long a ConfigMap or Secret must be quiet before the workloads consuming it are nudged (0: at once).")
	fs.DurationVar(&o.debounceMax, "debounce-max", watcher.DefaultDebounceMax, "Longest wait from the first change of a source that never stops changing.")
	fs.DurationVar(&o.readTimeout, "read-timeout", webhook.DefaultReadTimeout, "Deadline for the live ConfigMap and Secret reads of one admission or one check.")
	fs.StringVar(&o.namespaceLabel, "namespace-label", stamp.InjectLabel, "Label (value \"enabled\") that opts a namespace, or a single workload, in; must match the registration's selectors.")
	fs.StringVar(&o.excludeNamespaces, "exclude-namespaces", strings.Join(scope.DefaultExcluded, ","), "Comma-separated namespaces never acted in, whatever their labels; must match the registration's namespaceSelector (the chart adds its own namespace).")
	fs.DurationVar(&o.minRolloutInterval, "min-rollout-interval", watcher.DefaultMinRolloutInterval, "Least time between two rollouts of one workload caused by configstamp (a writer that never stops); the latest content always lands. 0: no limit.")
	fs.BoolVar(&o.rollStaleAtInstall, "roll-stale-at-install", false, "Roll unstamped workloads that predate configstamp when their config was written after their pods started. Off: installing rolls nothing.")
	fs.BoolVar(&o.secrets, "secrets", false, "Also hash the Secrets pod templates consume (secret volumes, projected secrets, envFrom.secretRef, secretKeyRef), keyed with the key in --secret-hash-key. Off: Secrets are never read.")
	fs.StringVar(&o.secretHashKey, "secret-hash-key", "", "NAMESPACE/NAME of the Secret holding the HMAC key of Secret digests (created with a random key if missing); required with --secrets.")
	fs.BoolVar(&o.argoRollouts, "argo-rollouts", false, "Also stamp Argo Rollouts (argoproj.io/v1alpha1), once their CRD exists (detected at start and later).")
	fs.BoolVar(&o.version, "version", false, "Print the version and exit.")
	fs.BoolVar(&o.enableHTTP2, "enable-http2", false, "Offer HTTP/2 on the webhook server. Off: HTTP/1.1 only, which is all the API server needs (and leaves HTTP/2's stream-level attacks, CVE-2023-44487 and CVE-2023-39325, out of reach).")
	fs.IntVar(&o.concurrency, "concurrency", watcher.DefaultConcurrency, "How many workloads of each kind the watcher checks and nudges at once.")
	fs.Float64Var(&o.qps, "kube-api-qps", 20, "Client-side rate limit of requests to the API server, per second.")
	fs.IntVar(&o.burst, "kube-api-burst", 30, "Client-side burst of requests to the API server.")
	fs.StringVar(&o.registrationName, "registration-name", webhook.ConfigurationName, "The MutatingWebhookConfiguration installed for configstamp (the chart's): the watcher reads since when each kind is covered from it, and self-signed and --tls-secret modes keep its caBundle. Dev mode uses --dev-registration-name instead.")
	o.certs.bindFlags(fs)
	o.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if o.debounce < 0 || o.debounceMax < 0 || o.minRolloutInterval < 0 || o.shutdownDelay < 0 {
		return nil, errors.New("--debounce, --debounce-max, --min-rollout-interval and --shutdown-delay must not be negative")
	}
	if o.certs.enabled() && o.devWebhookURL != "" {
		return nil, errors.New("--self-signed-secret and --tls-secret exclude --dev-webhook-url")
	}
	if err := o.certs.validate(); err != nil {
		return nil, err
	}
	if o.registrationName == "" {
		return nil, errors.New("--registration-name must not be empty")
	}
	if o.secrets && o.secretHashKey == "" {
		return nil, errors.New("--secrets needs --secret-hash-key NAMESPACE/NAME")
	}
	if o.secretHashKey != "" {
		if _, err := hashkey.ParseRef(o.secretHashKey); err != nil {
			return nil, fmt.Errorf("--secret-hash-key: %w", err)
		}
	}
	return o, nil
}

func run(ctx context.Context, args []string) error {
	o, err := parseFlags(flag.CommandLine, args)
	if err != nil {
		return err
	}
	if o.version {
		fmt.Println(versionLine())
		return nil
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.zap)))
	log := ctrl.Log.WithName("setup")

	sc, err := scope.New(o.namespaceLabel, strings.Split(o.excludeNamespaces, ","))
	if err != nil {
		return err
	}
	kinds := workload.Builtin()
	if o.argoRollouts {
		kinds = append(kinds, workload.Rollout)
	}
	sources := stamp.Options{Secrets: o.secrets}

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	cfg.UserAgent = "configstamp"
	// The webhook's warnings on the watcher's nudges tell why one was not stamped.
	cfg.WarningHandler, cfg.WarningHandlerWithContext = nil, watcher.WarningHandler()

	// The registration configstamp reads (coverage) and, in dev mode, writes.
	registrationName := o.registrationName
	var registration *admissionregistrationv1.MutatingWebhookConfiguration
	if o.devWebhookURL != "" {
		registrationName = o.devRegistrationName
		u, err := url.Parse(o.devWebhookURL)
		if err != nil || u.Scheme != "https" || u.Hostname() == "" {
			return fmt.Errorf("--dev-webhook-url %q: want https://HOST[:PORT]", o.devWebhookURL)
		}
		if o.webhookCertDir == "" {
			if o.webhookCertDir, err = os.MkdirTemp("", "configstamp-certs-"); err != nil {
				return fmt.Errorf("create cert dir: %w", err)
			}
			defer os.RemoveAll(o.webhookCertDir)
		}
		ca, err := certs.EnsureSelfSigned(o.webhookCertDir, u.Hostname(), "localhost", "127.0.0.1")
		if err != nil {
			return err
		}
		u.Path = ""
		registration = webhook.Registration(admissionregistrationv1.WebhookClientConfig{URL: new(u.String()), CABundle: ca}, sc, kinds)
		registration.Name = registrationName
		log.Info("Using a self-signed serving certificate", "dir", o.webhookCertDir, "url", u.String())
	}

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := argo.AddToScheme(scheme); err != nil {
		return err
	}
	// One uncached client for the few direct reads and writes (the permission check,
	// the certificate mode, the hash key Secret, dev mode's registration): never a cache
	// of Secrets.
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	// Fail start-up with the missing permissions named rather than serve admission with
	// a watcher whose caches never sync.
	want := needed(kinds, o.secrets, o.metricsSecure, registrationName)
	if o.certs.enabled() {
		// Both certificate modes keep the registration's caBundle, watching it by name.
		for _, verb := range []string{"update", "list", "watch"} {
			want = append(want, access{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", verb, registrationName, ""})
		}
		want = append(want, o.certs.secretAccess()...)
	}
	missing, unchecked := checkAccess(ctx, direct, want)
	if missing != nil {
		return missing
	}
	if unchecked != nil {
		log.Error(unchecked, "Could not check configstamp's permissions; starting anyway")
	}
	keeper, err := o.certs.keeper(cfg, direct, o.webhookCertDir, registrationName)
	if err != nil {
		return err
	}
	if keeper != nil {
		// The webhook server needs its files before it starts; before the manager,
		// which binds the probe address ensureFirst answers on meanwhile.
		if err := ensureFirst(ctx, keeper, o.probeAddr); err != nil {
			return fmt.Errorf("serving certificate: %w", err)
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
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
			TLSOpts: []func(*tls.Config){webhookTLS(o.enableHTTP2)},
		}),
		GracefulShutdownTimeout: new(10 * time.Second),
		// The watch caches keep only what configstamp reads: no last-applied copy of
		// the whole object, and of managedFields only the latest write time.
		Cache: cache.Options{DefaultTransform: watcher.TrimForCache()},
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}

	// Admission reads get a client of their own, not throttled client-side: they are
	// bounded by the API server's admission traffic and must never wait behind the
	// watcher's reads.
	admissionCfg := rest.CopyConfig(cfg)
	admissionCfg.QPS = -1
	admissionReader, err := client.New(admissionCfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("create admission client: %w", err)
	}
	// Digests of unchanged ConfigMaps are remembered by resourceVersion, so a check
	// reads metadata only; 32 bytes each, bounded.
	digests := configread.NewDigestCache(digestCacheSize)
	self, err := whoAmI(ctx, admissionCfg, scheme)
	if err != nil {
		log.Error(err, "Could not tell which user configstamp runs as (SelfSubjectReview); nudge and record markers from any user are honoured")
	} else {
		log.Info("Running as", "user", self)
	}
	var key func() []byte
	if o.secrets {
		// Every replica needs the key before it serves admission, and follows the
		// Secret afterwards (a rotation), so that all replicas digest alike.
		ref, _ := hashkey.ParseRef(o.secretHashKey)
		keeper := &hashkey.Keeper{Client: direct, Ref: ref}
		if err := keeper.Load(ctx); err != nil {
			return fmt.Errorf("secret hash key: %w", err)
		}
		if err := mgr.Add(keeper); err != nil {
			return err
		}
		key = keeper.Key
		log.Info("Loaded the hash key of Secret digests", "secret", ref.String())
	}
	// The builtin kinds' and (with --argo-rollouts) the Rollout path are served from the
	// start, whether or not the CRD exists yet: the API server calls only what exists.
	webhook.SetupWithManager(mgr, webhook.Options{
		ReadTimeout: o.readTimeout, Reader: admissionReader, Cache: digests, Self: self,
		Kinds: kinds, Sources: sources, Key: key,
	})
	if err := watcher.SetupWithManager(ctx, mgr, watcher.Options{
		Debounce: o.debounce, DebounceMax: o.debounceMax, ReadTimeout: o.readTimeout, Concurrency: o.concurrency,
		Scope: sc, Registration: registrationName, MinRolloutInterval: o.minRolloutInterval,
		RollStaleAtInstall: o.rollStaleAtInstall, Cache: digests,
		ArgoRollouts: o.argoRollouts, Sources: sources, Key: key,
	}); err != nil {
		return err
	}
	if keeper != nil {
		if err := mgr.Add(keeper); err != nil {
			return err
		}
	}
	if registration != nil {
		if err := mgr.Add(&webhook.Registrar{Client: direct, Registration: registration, Started: mgr.GetWebhookServer().StartedChecker(), Keep: o.devKeepRegistration}); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return err
	}
	mgrCtx, stop, stopping := delayShutdown(ctx, o.shutdownDelay)
	defer stop()
	if err := mgr.AddReadyzCheck("shutdown", stopping); err != nil {
		return err
	}

	log.Info("Starting configstamp", "version", buildVersion(), "debounce", o.debounce.String(), "leaderElect", o.leaderElect, "devWebhookURL", o.devWebhookURL,
		"secrets", o.secrets, "argoRollouts", o.argoRollouts, "registration", registrationName, "metricsSecure", o.metricsSecure, "shutdownDelay", o.shutdownDelay.String())
	return mgr.Start(mgrCtx)
}
