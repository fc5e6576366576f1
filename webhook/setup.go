package webhook

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// Options configure the admission webhook.
type Options struct {
	// ReadTimeout bounds the live ConfigMap reads of one admission.
	ReadTimeout time.Duration
	// Reader reads ConfigMaps live. Default: the manager's API reader. Prefer a client
	// with a rate limit of its own: admission reads must not queue behind the watcher's
	// past the webhook's timeout, nor a flood of reviews take the watcher's budget.
	Reader client.Reader
	// InScope tells whether a review is in scope (Stamper.InScope).
	InScope ScopeFunc
	// MaxRequestBytes caps a request's body (default DefaultMaxRequestBytes);
	// MaxInFlight the requests read or handled at once (default DefaultMaxInFlight).
	MaxRequestBytes int64
	MaxInFlight     int
	// Cache of source digests shared with the watcher (optional).
	Cache *configread.DigestCache
	// Self is the user configstamp runs as: only its nudges and records count, and
	// those of Watchers (the watcher's users, when it runs as another).
	Self     string
	Watchers []string
	// Kinds are the workload kinds to stamp (default: workload.Builtin()).
	Kinds []*workload.Kind
	// Sources says which sources count; Key returns the installation's hash key (every digest is keyed).
	Sources stamp.Options
	Key     func() []byte
	// FreshKey reads the key again, rate-limited (Stamper.FreshKey).
	FreshKey func(ctx context.Context, since time.Time) bool
}

// SetupWithManager registers the stamper on the manager's webhook server, at the path of
// every kind. Every replica serves admission; nothing here needs leader election.
func SetupWithManager(mgr ctrl.Manager, opts Options) {
	if opts.Reader == nil {
		opts.Reader = mgr.GetAPIReader()
	}
	if len(opts.Kinds) == 0 {
		opts.Kinds = workload.Builtin()
	}
	st := &Stamper{
		Kinds: opts.Kinds, Sources: opts.Sources, Key: opts.Key, FreshKey: opts.FreshKey,
		Reader: opts.Reader, ReadTimeout: opts.ReadTimeout, Cache: opts.Cache, Self: opts.Self, Watchers: opts.Watchers, InScope: opts.InScope,
	}
	wh := &admission.Webhook{
		Handler: st,
		// The handler logs namespace, name and user itself; the default constructor
		// would add them a second time under the same keys.
		LogConstructor: func(base logr.Logger, req *admission.Request) logr.Logger {
			l := base
			if req != nil {
				l = l.WithValues("requestID", req.UID)
			}
			return l
		},
	}
	wh = wh.WithRecoverPanic(true)
	g := &guard{wh: wh, maxBytes: opts.MaxRequestBytes, slots: make(chan struct{}, opts.MaxInFlight)}
	if g.maxBytes <= 0 {
		g.maxBytes = DefaultMaxRequestBytes
	}
	if opts.ReadTimeout > 0 {
		g.write = bodyDeadline + opts.ReadTimeout + time.Second
	}
	if opts.MaxInFlight <= 0 {
		g.slots = make(chan struct{}, DefaultMaxInFlight)
	}
	for path, h := range kindGuards(g, opts.Kinds) {
		mgr.GetWebhookServer().Register(path, h)
	}
}
