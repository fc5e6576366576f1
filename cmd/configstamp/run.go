package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/configstamp/configstamp/internal/hashkey"
	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/waves"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/watcher"
	"github.com/configstamp/configstamp/webhook"
)

type options struct {
	role                    string
	devWebhookURL           string
	devRegistrationName     string
	devKeepRegistration     bool
	metricsSecure           bool
	shutdownDelay           time.Duration
	webhookPort             int
	webhookHost             string
	webhookCertDir          string
	webhookClientCA         string
	metricsAddr             string
	probeAddr               string
	pprofAddr               string
	leaderElect             bool
	watcherUsers            []string
	leaderElectionNamespace string
	leaderElectionID        string
	debounce                time.Duration
	debounceMax             time.Duration
	readTimeout             time.Duration
	concurrency             int
	namespaceLabel          string
	excludeNamespaces       string
	watchNamespaces         string
	coverageConfigMap       string
	minRolloutInterval      time.Duration
	waves                   waves.Settings
	wavesDeadline           time.Duration
	recheckInterval         time.Duration
	rollStaleAtInstall      bool
	secrets                 bool
	csiSecrets              bool
	hashKey                 string
	hashKeyRefresh          time.Duration
	argoRollouts            bool
	fluxHelmReleases        bool
	enableHTTP2             bool
	version                 bool
	registrationName        string
	certs                   certOptions
	qps                     float64
	burst                   int
	bounds                  boundsOptions
	notify                  notifyOptions
	zap                     zap.Options
}

// parseFlags defines configstamp's flags on fs, parses args and checks them. run passes
// flag.CommandLine, where controller-runtime's config package has registered --kubeconfig.
func parseFlags(fs *flag.FlagSet, args []string) (*options, error) {
	o := bindOptions(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	return o, nil
}

// bindOptions defines configstamp's flags on fs, bound to the options it returns: the
// server's parser, which the command-line tools also read an install's args with.
func bindOptions(fs *flag.FlagSet) *options {
	o := &options{}
	fs.StringVar(&o.role, "role", roleAll, "What this process runs: webhook (serves admission on every replica, no leader election, no workload or source informers: scale it out), watcher (the leader-elected controllers that nudge workloads when their config changes; no webhook server) or all (both in one process: dev mode, a single-Deployment install). The user agent names the role (configstamp-webhook, configstamp-watcher; audit logs). --role watcher refuses the certificate flags, --dev-webhook-url, --webhook-client-ca-file and --watcher-user; --role webhook checks at start only for what it reads (get of sources and CronJobs, the hash key, list and watch of Namespaces unless namespaced) and its certificate mode's grants. Its writes' field manager is configstamp in every role.")
	fs.StringVar(&o.devWebhookURL, "dev-webhook-url", "", "Run against a cluster outside it (local use, tests): generate a CA and serving certificate, and register this URL (e.g. https://127.0.0.1:9443) in the MutatingWebhookConfiguration --dev-registration-name, deleted again on a clean exit. An installed chart's registration is never touched. Empty in a cluster, where the chart registers the webhook.")
	fs.StringVar(&o.devRegistrationName, "dev-registration-name", webhook.DevConfigurationName, "Dev mode: name of the MutatingWebhookConfiguration it creates (refused if one of that name exists that dev mode did not make).")
	fs.BoolVar(&o.devKeepRegistration, "dev-keep-registration", false, "Dev mode: leave the registration in place on exit (so that a restart behaves like an installed webhook's).")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", false, "Serve metrics over HTTPS (a self-generated certificate), each request authenticated (TokenReview) and authorized (SubjectAccessReview: get on the non-resource URL /metrics). Needs create of tokenreviews and subjectaccessreviews.")
	fs.DurationVar(&o.shutdownDelay, "shutdown-delay", 0, "On SIGTERM, report not ready and keep serving admission this long before stopping, so that API servers stop calling this replica first (longer than the cluster's endpoint propagation, a few seconds).")
	fs.IntVar(&o.webhookPort, "webhook-port", 9443, "Port the admission webhook server listens on.")
	fs.StringVar(&o.webhookHost, "webhook-host", "", "Address the admission webhook server binds to (empty: all).")
	fs.StringVar(&o.webhookCertDir, "webhook-cert-dir", "", "Directory holding tls.crt and tls.key for the webhook server; reloaded when they change. With --dev-webhook-url: reused if it also holds ca.crt, else a CA and certificate are generated into it (default: a fresh temporary directory). Default otherwise: /tmp/k8s-webhook-server/serving-certs.")
	fs.StringVar(&o.webhookClientCA, "webhook-client-ca-file", "", "PEM file of the CA(s) the API server's client certificate must be signed by: the webhook server then refuses, during the TLS handshake, every caller without such a certificate (the API server presents one when its admission configuration says so: docs/install.md, Client certificates). Watched: a rotated file is taken in without a restart. Empty: no client certificate asked for.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus metrics endpoint; \"0\" disables it.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints; \"0\" disables them. /readyz: ready once the webhook serves (--role watcher: once its caches have synced), not ready once shutting down.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "0", "Address of the net/http/pprof endpoints; \"0\" disables them.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "Elect a leader so that only one replica runs the watcher (--role watcher or all); with --role all every replica serves admission, and a replica that loses the lease exits. Refused with --role webhook.")
	fs.Func("watcher-user", "A user whose nudge and record markers the webhook honours besides its own (repeated or comma-separated): the watcher's, when it runs as another user, e.g. system:serviceaccount:configstamp-system:configstamp (the chart's split roles set it). Markers of any other user are stripped and ignored. Refused with --role watcher.", func(v string) error {
		for u := range strings.SplitSeq(v, ",") {
			if u = strings.TrimSpace(u); u != "" {
				o.watcherUsers = append(o.watcherUsers, u)
			}
		}
		return nil
	})
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease (required out of cluster).")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "configstamp-watcher", "Name of the leader election Lease.")
	fs.DurationVar(&o.debounce, "debounce", watcher.DefaultDebounce, "How long a ConfigMap or Secret must be quiet before the workloads consuming it are nudged (0: at once).")
	fs.DurationVar(&o.debounceMax, "debounce-max", watcher.DefaultDebounceMax, "Longest wait from the first change of a source that never stops changing.")
	fs.DurationVar(&o.readTimeout, "read-timeout", webhook.DefaultReadTimeout, "Deadline for the live ConfigMap and Secret reads of one admission or one check.")
	fs.StringVar(&o.namespaceLabel, "namespace-label", stamp.InjectLabel, "Label (value \"enabled\") that opts a namespace, or a single workload, in; must match the registration's selectors.")
	fs.StringVar(&o.excludeNamespaces, "exclude-namespaces", strings.Join(scope.DefaultExcluded, ","), "Comma-separated namespaces never acted in, whatever their labels; must match the registration's namespaceSelector (the chart adds its own namespace).")
	fs.StringVar(&o.watchNamespaces, "watch-namespaces", "", "Namespaced install: comma-separated namespaces acted in (every workload in them, no opt-in label; --exclude-namespaces still wins), under Roles in those namespaces alone: no Namespace and nothing cluster-wide is read. Needs --coverage-configmap. Empty: every namespace that opts in.")
	fs.StringVar(&o.coverageConfigMap, "coverage-configmap", "", "Namespaced install: NAMESPACE/NAME of the ConfigMap (created with the registration, as the chart does) on which the watcher keeps since when each kind is covered, in place of the registration it may not read.")
	fs.DurationVar(&o.minRolloutInterval, "min-rollout-interval", watcher.DefaultMinRolloutInterval, "Least time between two rollouts of one workload caused by configstamp (a writer that never stops); the latest content always lands. 0: no limit.")
	o.waves.Threshold = 5
	fs.Func("waves", "Roll the consumers of a changed ConfigMap or Secret in health-gated waves, for the whole cluster: \"on\" (steps "+waves.DefaultSteps+") or the steps after the canaries, e.g. \"1,10%,50%\"; the rest roll last. Off by default; a source's configstamp.io/waves annotation, or its namespace's annotation or label, turns them on or off for it (docs/waves.md).", func(v string) error {
		s, problems := waves.ForSource(o.waves, map[string]string{waves.Annotation: v})
		if len(problems) > 0 {
			return errors.New(strings.Join(problems, "; "))
		}
		o.waves = s
		return nil
	})
	fs.IntVar(&o.waves.Threshold, "waves-threshold", 5, "Waves apply only to a change that rolls at least this many workloads (a namespace's or a source's configstamp.io/waves-threshold annotation overrides it).")
	fs.DurationVar(&o.wavesDeadline, "waves-deadline", 10*time.Minute, "How long a rolled StatefulSet, DaemonSet, Rollout or Deployment without a progressDeadlineSeconds may take to become available before its wave fails (a Deployment's is its progressDeadlineSeconds; a namespace's or a source's configstamp.io/waves-deadline annotation wins).")
	fs.DurationVar(&o.recheckInterval, "recheck-interval", watcher.DefaultRecheckInterval, "How often the leader goes over every workload in its cache and checks again those whose template, stamp, configstamp annotations or sources' versions moved since their last check (a safety net for a change no event rolled; jittered by up to 20%). 0: never.")
	fs.BoolVar(&o.rollStaleAtInstall, "roll-stale-at-install", false, "Roll unstamped workloads that predate configstamp when their config was written after their pods started. Off: installing rolls nothing.")
	fs.BoolVar(&o.secrets, "secrets", false, "Also hash the Secrets pod templates consume (secret volumes, projected secrets, envFrom.secretRef, secretKeyRef). Off: Secrets are never read.")
	fs.BoolVar(&o.csiSecrets, "csi-secrets", false, "Also follow the Secrets Store CSI driver: a csi volume of driver secrets-store.csi.k8s.io counts as its SecretProviderClass, digested (keyed) over the object versions the driver records in SecretProviderClassPodStatus objects, so a rotation rolls the workload once. Its CRDs are detected at start and later. Off: nothing of the driver's is read.")
	fs.StringVar(&o.hashKey, "hash-key", "", "NAMESPACE/NAME of the Secret holding the installation's HMAC key, under which every digest is keyed per namespace (required). An empty Secret (the chart's) gets a random key; a missing one is created when configstamp may (dev mode).")
	fs.StringVar(&o.hashKey, "secret-hash-key", "", "Deprecated: use --hash-key.")
	fs.DurationVar(&o.hashKeyRefresh, "hash-key-refresh", hashkey.DefaultRefresh, "How often each replica reads the --hash-key Secret again, to follow a rotation. A replica that meets a record or nudge made under another key reads it at once (at most once a second).")
	fs.BoolVar(&o.argoRollouts, "argo-rollouts", false, "Also stamp Argo Rollouts (argoproj.io/v1alpha1), once their CRD exists (detected at start and later).")
	fs.BoolVar(&o.fluxHelmReleases, "flux-helmreleases", false, "Also request a reconcile of Flux HelmReleases (helm.toolkit.fluxcd.io/v2) when the values they take from ConfigMaps (and Secrets) change, once their CRD exists.")
	fs.BoolVar(&o.version, "version", false, "Print the version and exit.")
	fs.BoolVar(&o.enableHTTP2, "enable-http2", false, "Offer HTTP/2 on the webhook server and the HTTPS metrics server (both TLS 1.2 at least). Off: HTTP/1.1 only, which is all the API server needs (and leaves HTTP/2's stream-level attacks, CVE-2023-44487 and CVE-2023-39325, out of reach).")
	fs.IntVar(&o.concurrency, "concurrency", watcher.DefaultConcurrency, "How many workloads of each kind the watcher checks and nudges at once.")
	fs.Float64Var(&o.qps, "kube-api-qps", 20, "Client-side rate limit of requests to the API server, per second: the watcher's and start-up's (the webhook's reads have --webhook-api-qps).")
	fs.IntVar(&o.burst, "kube-api-burst", 30, "Client-side burst of requests to the API server.")
	o.bounds.bind(fs)
	o.notify.bind(fs)
	fs.StringVar(&o.registrationName, "registration-name", webhook.ConfigurationName, "The MutatingWebhookConfiguration installed for configstamp (the chart's): the watcher reads since when each kind is covered from it, and self-signed and --tls-secret modes keep its caBundle. Dev mode uses --dev-registration-name instead.")
	o.certs.bindFlags(fs)
	o.zap.BindFlags(fs)
	return o
}

// validate checks the parsed flags against each other.
func (o *options) validate() error {
	if o.debounce < 0 || o.debounceMax < 0 || o.minRolloutInterval < 0 || o.shutdownDelay < 0 || o.recheckInterval < 0 {
		return errors.New("--debounce, --debounce-max, --min-rollout-interval, --recheck-interval and --shutdown-delay must not be negative")
	}
	if err := o.validateRole(); err != nil {
		return err
	}
	if o.wavesDeadline < waves.MinDeadline || o.wavesDeadline > waves.MaxDeadline {
		// The annotations' bounds: 0 would fail every rolled workload at once.
		return fmt.Errorf("--waves-deadline %s: want a duration from %s to %s", o.wavesDeadline, waves.MinDeadline, waves.MaxDeadline)
	}
	if o.hashKeyRefresh <= 0 {
		return errors.New("--hash-key-refresh must be positive")
	}
	if o.bounds.digestCacheEntries < 1 {
		// The LRU's 0 is no bound at all.
		return errors.New("--digest-cache-entries must be at least 1")
	}
	if o.certs.enabled() && o.devWebhookURL != "" {
		return errors.New("--self-signed-secret and --tls-secret exclude --dev-webhook-url")
	}
	if err := o.certs.validate(); err != nil {
		return err
	}
	if err := o.validateNamespaced(); err != nil {
		return err
	}
	if err := o.notify.validate(); err != nil {
		return err
	}
	if o.registrationName == "" {
		return errors.New("--registration-name must not be empty")
	}
	if o.hashKey == "" && !o.version {
		return errors.New("--hash-key NAMESPACE/NAME is required: every digest is keyed with the key in that Secret")
	}
	if _, err := hashkey.ParseRef(o.hashKey); err != nil && !o.version {
		return fmt.Errorf("--hash-key: %w", err)
	}
	return nil
}

// run starts the server step by step; main logs the error it returns and exits non-zero.
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
	newStdLog(ctrl.Log.WithName("http")).install()
	setMemoryLimit(ctrl.Log.WithName("setup"))
	setGCPercent(o.role, ctrl.Log.WithName("setup"))
	s, err := newSetup(o)
	if err != nil {
		return err
	}
	registration, cleanup, err := s.devRegistration()
	defer cleanup()
	if err != nil {
		return err
	}
	if registration != nil && o.watches() {
		s.devRegistered = make(chan struct{})
	}
	if err := s.connect(); err != nil {
		return err
	}
	if err := s.checkAccess(ctx); err != nil {
		return err
	}
	keeper, err := s.certificates(ctx)
	if err != nil {
		return err
	}
	mgr, err := s.newManager()
	if err != nil {
		return err
	}
	if err := s.setupControllers(ctx, mgr); err != nil {
		return err
	}
	if err := s.addRunnables(mgr, keeper, registration); err != nil {
		return err
	}
	mgrCtx, stop, stopping := delayShutdown(ctx, o.shutdownDelay)
	defer stop()
	if err := mgr.AddReadyzCheck("shutdown", stopping); err != nil {
		return err
	}

	s.log.Info("Starting configstamp", "version", buildVersion(), "role", o.role, "debounce", o.debounce.String(), "leaderElect", o.leaderElect, "devWebhookURL", o.devWebhookURL,
		"watchNamespaces", s.scope.Watched, "secrets", o.secrets, "csiSecrets", o.csiSecrets, "argoRollouts", o.argoRollouts, "fluxHelmReleases", o.fluxHelmReleases, "registration", s.registrationName, "metricsSecure", o.metricsSecure, "webhookClientCA", o.webhookClientCA, "shutdownDelay", o.shutdownDelay.String())
	return mgr.Start(mgrCtx)
}
