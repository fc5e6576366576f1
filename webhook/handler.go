// Package webhook is configstamp's mutating admission webhook: it stamps the hash of the
// config a workload's pods consume into their template, so a config change rolls them.
package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/go-logr/logr"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// Path is where the API server sends Deployment admission reviews.
var Path = workload.Deployment.Path()

// Audit annotation keys; the API server prefixes them with the webhook entry's name.
const (
	AuditHash    = "config-hash"
	AuditSources = "sources"
	// AuditOtherKey: a nudge kept as stored, sent under another hash key (its
	// fingerprint, and the webhook's).
	AuditOtherKey = "other-key"
)

var errNoRequest = errors.New("admission review without a request (no uid)")

// DefaultReadTimeout bounds the live reads of one admission, well inside the
// registration's timeoutSeconds, so a slow API server never blocks a deploy.
const DefaultReadTimeout = 3 * time.Second

// Stamper is the admission handler. It is a raw admission.Handler rather than a
// CustomDefaulter because it has to set auditAnnotations and warnings.
type Stamper struct {
	// Kinds are the workload kinds it stamps (default: workload.Builtin()).
	Kinds []*workload.Kind
	// Sources says which sources count (Secrets or not).
	Sources stamp.Options
	// Reader reads sources live (manager.GetAPIReader()), never from a cache.
	Reader client.Reader
	// ReadTimeout bounds the reads of one admission.
	ReadTimeout time.Duration
	// Cache, when set, lets an unchanged source be checked with a metadata-only read.
	Cache *configread.DigestCache
	// Key returns the installation's hash key, under which every digest is keyed (required).
	Key func() []byte
	// FreshKey reads the key again unless it was read a moment ago, and reports whether
	// Key is fresh (hashkey.Keeper.Fresh); nil: Key is taken as it is.
	FreshKey func(ctx context.Context, since time.Time) bool
	// Self is the user this process runs as (with --role all, the watcher's too): only
	// its requests, and Watchers', may nudge or write a record. Empty with no Watchers:
	// anyone's marker counts.
	Self string
	// Watchers are the users configstamp's watcher runs as when not Self (the chart's
	// split roles, one ServiceAccount each): their markers count too, Self known or not.
	Watchers []string
	// InScope tells whether a review is in configstamp's scope; one outside is answered
	// with nothing read. Nil: every namespace (unit tests).
	InScope ScopeFunc
}

var _ admission.Handler = &Stamper{}

// Handle stamps CREATE and UPDATE of the workloads of its kinds. Whatever goes wrong short
// of an undecodable object, it admits the request: it never blocks a deploy.
func (s *Stamper) Handle(ctx context.Context, req admission.Request) (resp admission.Response) {
	start := time.Now()
	if handled, ok := ctx.Value(handledKey{}).(*bool); ok {
		*handled = true
	}
	defer func() {
		if r := recover(); r != nil {
			// A bug. Admit the request as it came: an answer of allowed=false (what
			// controller-runtime's own recovery sends) would refuse the write whatever
			// the failurePolicy, blocking a deploy.
			logf.FromContext(ctx).Error(fmt.Errorf("panic: %v", r), "Admitted unstamped: the handler panicked",
				"namespace", req.Namespace, "name", req.Name, "stack", string(debug.Stack()))
			observe(resultPanic, start)
			resp = admission.Allowed("").WithWarnings(panicWarning)
		}
	}()
	resp, result := s.handle(ctx, req)
	observe(result, start)
	return resp
}

// handle decodes the request, plans its admission and answers it, with the result it
// counts as.
func (s *Stamper) handle(ctx context.Context, req admission.Request) (admission.Response, string) {
	log := logf.FromContext(ctx)
	if req.UID == "" {
		if result, _ := s.namespaceOutside(ctx, req); result == "" {
			malformed(log, errNoRequest, "Rejected malformed admission review", "namespace", req.Namespace)
		}
		return admission.Errored(http.StatusBadRequest, errNoRequest), resultRejected
	}
	kind := workload.Find(s.kinds(), req.Kind.Group, req.Kind.Kind)
	if kind == nil {
		return admission.Allowed(fmt.Sprintf("configstamp does not stamp %s.%s", req.Kind.Kind, req.Kind.Group)), resultSkipped
	}
	if req.Operation != admissionv1.Create && (req.Operation != admissionv1.Update || kind.CreateOnly()) {
		return admission.Allowed(""), resultSkipped
	}
	log = log.WithValues("kind", kind.Kind)
	obj, old, bad := decodeReview(kind, req)
	if bad != nil {
		// Its labels unknown, it is placed by its namespace alone: outside it, it is
		// answered like any review outside; inside, refused.
		if result, warnings := s.namespaceOutside(ctx, req); result != "" {
			return respond(nil, warnings...), result
		}
		malformed(log, bad.err, bad.msg, "namespace", req.Namespace, "name", req.Name)
		return admission.Errored(http.StatusBadRequest, bad), resultRejected
	}
	if result, warnings := s.outside(ctx, req, obj, old); result != "" {
		return respond(nil, warnings...), result
	}
	readCtx, cancel, owner := s.owner(ctx, log, kind, req, obj)
	defer cancel()
	in := s.input(kind, req, obj, old, owner)
	p := in.plan(func() (stamp.Stamp, error) {
		return s.reader().StampOver(readCtx, in.namespace, in.srcs, in.storedSources())
	}, s.keyRead(ctx))
	p.write(log)
	if !in.dryRun {
		p.count()
	}
	resp := respond(in.patch(&p), p.warnings...)
	resp.AuditAnnotations = p.audit
	return resp, p.result
}

// owner reads, at the CREATE of a workload whose kind takes configstamp annotations from
// its controller (workload.Kind.AnnotationOwner: a Job's CronJob), that controller's
// annotations live (its metadata only). That read and the config reads after it share one deadline
// (ReadTimeout), so the admission stays inside the registration's timeout. The owner
// missing, forbidden, slow or replaced (another UID): nil and a log line, and the
// workload is stamped from its own annotations (never denied).
func (s *Stamper) owner(ctx context.Context, log logr.Logger, kind *workload.Kind, req admission.Request, obj client.Object) (context.Context, context.CancelFunc, map[string]string) {
	ownerKind, ref := kind.AnnotationOwner(obj)
	if ownerKind == nil || req.Operation != admissionv1.Create || s.Reader == nil {
		return ctx, func() {}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.readTimeout())
	// Its metadata only: the annotations and UID are all this reads of it.
	o := &metav1.PartialObjectMetadata{}
	o.SetGroupVersionKind(ownerKind.GVK())
	err := s.Reader.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: ref.Name}, o)
	if err == nil && o.GetUID() != ref.UID {
		err = fmt.Errorf("%s %s/%s has uid %s, not the owner's %s", ownerKind.Kind, req.Namespace, ref.Name, o.GetUID(), ref.UID)
	}
	if err != nil {
		log.Info("Stamped from its own annotations: its "+ownerKind.Kind+" could not be read",
			"namespace", req.Namespace, "name", obj.GetName(), "owner", ref.Name, "error", err.Error())
		return ctx, cancel, nil
	}
	return ctx, cancel, o.GetAnnotations()
}

// keyRead reads the key again through FreshKey (nil when there is none).
func (s *Stamper) keyRead(ctx context.Context) keyRead {
	if s.FreshKey == nil {
		return nil
	}
	// The nudge's key was in use by the time it arrived: a read started since is fresh.
	since := time.Now()
	return func() (string, bool) {
		if !s.FreshKey(ctx, since) {
			return "", false
		}
		return stamp.KeyFingerprint(s.Key()), true
	}
}

func (s *Stamper) kinds() []*workload.Kind {
	if len(s.Kinds) > 0 {
		return s.Kinds
	}
	return workload.Builtin()
}

func (s *Stamper) reader() *configread.Reader {
	return &configread.Reader{Client: s.Reader, Cache: s.Cache, Key: s.Key, Timeout: s.readTimeout(), KeyDigests: true}
}

func (s *Stamper) readTimeout() time.Duration {
	if s.ReadTimeout > 0 {
		return s.ReadTimeout
	}
	return DefaultReadTimeout
}

func respond(patches []jsonpatch.JsonPatchOperation, warnings ...string) admission.Response {
	resp := admission.Allowed("")
	if len(patches) > 0 {
		resp = admission.Patched("", patches...)
	}
	if len(warnings) > 0 {
		resp = resp.WithWarnings(passable(warnings)...)
	}
	return resp
}
