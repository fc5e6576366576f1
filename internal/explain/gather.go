package explain

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/internal/decide"
	"github.com/configstamp/configstamp/internal/hashkey"
	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/waves"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// Cluster reads what Explain and Impact decide from, live from the API server.
type Cluster struct {
	// Client reads directly from the API server (client.New), never from a cache.
	Client client.Client
	Scope  *scope.Scope
	// Secrets: Secrets count, as with the server's --secrets; used only when the
	// registration can't be read (secretsCount).
	Secrets bool
	// CSISecrets: the Secrets Store CSI driver's classes count, as with the server's
	// --csi-secrets.
	CSISecrets bool
	// HashKey names the Secret holding the installation's hash key (the server's
	// --hash-key); nil or unreadable: the webhook computes the digests (a dry-run).
	HashKey *types.NamespacedName
	// SecretsSet: Secrets was given explicitly (it then wins over a record's flag when
	// the registration can't be read).
	SecretsSet bool
	// SecretsFound: Secrets was read from the install's Deployment: it wins over a
	// record's flag, not over the coverage the running server recorded (a Deployment
	// being upgraded may say what its pods do not do yet).
	SecretsFound bool
	// Registration names the MutatingWebhookConfiguration (the server's
	// --registration-name): its configstamp.io/covered-since tells whether Secrets
	// count (key "secrets") and since when each kind is stamped.
	Registration string
	// RegistrationRead is the registration as the settings' discovery read it (nil:
	// read it by name); RegistrationReported: a registration that could not be read was
	// reported already (the coverage is then not known, without another warning).
	RegistrationRead     *admissionregistrationv1.MutatingWebhookConfiguration
	RegistrationReported bool
	// CoverageConfigMap is a namespaced install's --coverage-configmap: the coverage
	// is kept on that ConfigMap instead of the registration.
	CoverageConfigMap types.NamespacedName
	// MaxSources is the server's --max-sources (0: the default).
	MaxSources int
	// RollStale: the server runs with --roll-stale-at-install.
	RollStale bool
	// DryRunTimeout bounds the webhook's dry-run (0: DefaultDryRunTimeout).
	DryRunTimeout time.Duration
	// Waves are the server's --waves and --waves-threshold (internal/waves).
	Waves waves.Settings
	// Warn receives what the report could not take into account.
	Warn func(string)

	coverage     map[string]time.Time
	coverageRead bool
}

func (c *Cluster) warn(format string, a ...any) {
	if c.Warn != nil {
		c.Warn(fmt.Sprintf(format, a...))
	}
}

// Explain reads the workload, its namespace, its sources and its Events and explains it.
// The entry checks come first, as in the watcher: a workload they leave alone (skipped,
// being deleted, of a kind not covered, out of scope, past the source cap) is decided
// without reading its sources or asking the webhook, unless its scope is not known.
// A Rollout that runs another workload's pod template (spec.workloadRef) is explained as
// that workload.
func (c *Cluster) Explain(ctx context.Context, kind *workload.Kind, namespace, name string) (Report, error) {
	obj := kind.New()
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj); err != nil {
		return Report{}, describe(err, strings.ToLower(kind.Kind)+"/"+name, namespace)
	}
	c.ownerAnnotations(ctx, kind, obj, nil)
	if ref := workloadRef(obj); ref != nil {
		return c.explainRef(ctx, obj, ref)
	}
	in := Input{Kind: kind, Object: obj, NamespaceLabel: c.Scope.Label, RollStale: c.RollStale}
	ns, known, err := c.namespace(ctx, obj.GetNamespace())
	if err != nil {
		return Report{}, err
	}
	in.InScope, in.ScopeUnknown = c.inScope(ns, known, obj)
	in.KindNotCovered = c.kindNotCovered(ctx, kind)
	if tmpl := kind.Template(obj); tmpl != nil {
		in.Options = c.options(c.secretsCount(ctx, obj, tmpl))
		refs := stamp.Consumed(obj.GetAnnotations(), &tmpl.Spec, in.Options)
		if stop, _ := gate(in, refs); stop == decide.Pass || stop == decide.StopScopeUnknown {
			if in.Live, err = c.live(ctx, kind, obj, refs); err != nil {
				return Report{}, err
			}
			// The times: what the watcher decides from without a valid record, and
			// what "written since" compares with.
			in.Times = c.times(ctx, kind, obj, ns, known)
		} else {
			in.Live.NotRead = true
		}
	}
	var evs corev1.EventList
	if err := c.Client.List(ctx, &evs, client.InNamespace(namespace), client.MatchingFields{
		"involvedObject.name": name, "involvedObject.kind": kind.Kind,
	}); err != nil {
		c.warn("cannot list Events: %v", err)
	}
	in.Events = evs.Items
	r := Explain(in)
	applyWaves(&r, c.wavesNotes(ctx, ns, known, waves.MemberID(kind, name), r, in.Live.nsKey))
	c.wavesFailed(ctx, ns, known, obj, &r, in.Live.nsKey)
	return r, nil
}

// ownerAnnotations gives obj the annotations it takes from its controller
// (workload.Kind.AnnotationOwner: a Job's CronJob, as the webhook read it at the Job's
// create; read now, so an edit of the CronJob's since shows). The owner unreadable, or
// of another UID: obj is judged by its own, with a warning, as the webhook stamped it.
// read holds the owners already read by UID (nil: none kept), so the Jobs of one
// CronJob cost one GET and one warning.
func (c *Cluster) ownerAnnotations(ctx context.Context, kind *workload.Kind, obj client.Object, read map[types.UID]map[string]string) {
	ownerKind, ref := kind.AnnotationOwner(obj)
	if ownerKind == nil {
		return
	}
	ann, seen := read[ref.UID]
	if !seen {
		ann = c.readOwnerAnnotations(ctx, ownerKind, obj.GetNamespace(), ref)
		if read != nil {
			read[ref.UID] = ann
		}
	}
	if ann != nil {
		obj.SetAnnotations(workload.WithOwner(obj.GetAnnotations(), ann))
	}
}

// readOwnerAnnotations reads the annotations of the owner ref names; nil, with a
// warning, when it cannot be read or is another object (another UID).
func (c *Cluster) readOwnerAnnotations(ctx context.Context, ownerKind *workload.Kind, namespace string, ref *metav1.OwnerReference) map[string]string {
	o := ownerKind.New()
	err := c.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, o)
	if err == nil && o.GetUID() != ref.UID {
		err = fmt.Errorf("its uid is %s, not the owner's %s", o.GetUID(), ref.UID)
	}
	if err != nil {
		c.warn("judged by its own annotations: cannot read its %s %s: %v", strings.ToLower(ownerKind.Kind), ref.Name, err)
		return nil
	}
	if ann := o.GetAnnotations(); ann != nil {
		return ann
	}
	return map[string]string{}
}

// options are the stamp options of the server's settings, with Secrets counted or not.
func (c *Cluster) options(secrets bool) stamp.Options {
	return stamp.Options{Secrets: secrets, CSISecrets: c.CSISecrets, MaxSources: c.MaxSources}
}

// inScope says whether obj is in scope, from its namespace ns (known: ns could be read)
// and its own labels; unknown when that cannot be told.
func (c *Cluster) inScope(ns *corev1.Namespace, known bool, obj client.Object) (in, unknown bool) {
	switch {
	case c.Scope.Namespaced():
		// The namespace list alone decides: no Namespace is read.
		return c.Scope.IncludesWorkload(obj.GetNamespace(), nil, obj.GetLabels()), false
	case known:
		return c.Scope.IncludesWorkload(ns.Name, ns.Labels, obj.GetLabels()), false
	case slices.Contains(c.Scope.Excluded, obj.GetNamespace()):
		return false, false
	case c.Scope.Labelled(obj.GetLabels()):
		return true, false
	}
	return false, true
}

// kindNotCovered says whether the registration shows that configstamp does not cover
// kind (Rollouts without --argo-rollouts); false when that cannot be read.
func (c *Cluster) kindNotCovered(ctx context.Context, kind *workload.Kind) bool {
	if kind != workload.Rollout {
		return false
	}
	cov := c.readCoverage(ctx)
	if cov == nil {
		return false
	}
	_, covered := cov[workload.Rollout.Resource]
	return !covered
}

// namespace reads a namespace; known is false when it may not be read, or in a
// namespaced install, which reads none.
func (c *Cluster) namespace(ctx context.Context, name string) (*corev1.Namespace, bool, error) {
	if c.Scope.Namespaced() {
		return nil, false, nil
	}
	var ns corev1.Namespace
	if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, &ns); err != nil {
		if apierrors.IsForbidden(err) {
			c.warn("cannot read namespace %s (forbidden): whether it opts in is not known", name)
			return nil, false, nil
		}
		return nil, false, describe(err, "namespace/"+name, "")
	}
	return &ns, true, nil
}

// readCoverage reads the coverage annotation once (from the registration, or in a
// namespaced install from the coverage ConfigMap); nil when it can't.
func (c *Cluster) readCoverage(ctx context.Context) map[string]time.Time {
	if c.coverageRead {
		return c.coverage
	}
	c.coverageRead = true
	record, what := c.coverageRecord(ctx)
	if record == nil {
		return nil
	}
	m, err := decide.ParseCoverage(record.GetAnnotations()[stamp.CoverageAnnotation])
	if err != nil {
		c.warn("the %s's %s can't be read: %v", what, stamp.CoverageAnnotation, err)
	}
	// Since when each is covered, as the watcher reads it (decide.CoveredSince).
	cov := map[string]time.Time{}
	for _, k := range append(slices.Collect(maps.Keys(m)), workload.Deployment.Resource) {
		cov[k] = decide.CoveredSince(record.GetCreationTimestamp().Time, m, k)
	}
	c.coverage = cov
	return cov
}

// coverageRecord reads the object the coverage is kept on, and names it; nil when it
// can't be read.
func (c *Cluster) coverageRecord(ctx context.Context) (client.Object, string) {
	if cm := c.CoverageConfigMap; cm.Name != "" {
		what := "coverage ConfigMap " + cm.String()
		meta := configread.NewMeta(stamp.KindConfigMap)
		if err := c.Client.Get(ctx, cm, meta); err != nil {
			c.warn("cannot read the %s (--coverage-configmap): %v", what, apierrors.ReasonForError(err))
			return nil, what
		}
		return meta, what
	}
	name := c.Registration
	if name == "" {
		name = "configstamp"
	}
	what := "registration " + name
	if c.RegistrationRead != nil {
		return c.RegistrationRead, "registration " + c.RegistrationRead.Name
	}
	var reg admissionregistrationv1.MutatingWebhookConfiguration
	err := c.Client.Get(ctx, client.ObjectKey{Name: name}, &reg)
	switch {
	case err == nil:
		return &reg, what
	case c.RegistrationReported:
	case apierrors.IsNotFound(err):
		c.warn("the registration %s (MutatingWebhookConfiguration) does not exist: is --registration-name the server's? (without it the watcher takes every unstamped workload as installed over)", name)
	default:
		c.warn("cannot read the registration %s (MutatingWebhookConfiguration; --registration-name): %v", name, apierrors.ReasonForError(err))
	}
	return nil, what
}

// secretsCount tells whether Secrets count for the workload: as --secrets says when it
// was given; else as the coverage the running server recorded says (key "secrets"); else
// as the install's Deployment says; if none can be read, as the workload's valid record
// says (when it consumes a Secret), else not.
func (c *Cluster) secretsCount(ctx context.Context, obj client.Object, tmpl *corev1.PodTemplateSpec) bool {
	if c.SecretsSet {
		return c.Secrets
	}
	if cov := c.readCoverage(ctx); cov != nil {
		_, on := cov[decide.CoverageSecrets]
		if on != c.Secrets && c.SecretsFound {
			c.warn("the install's Deployment says --secrets=%t, but the running server's coverage says %t (an upgrade rolling out?): judging by the coverage", c.Secrets, on)
		}
		return on
	}
	if c.SecretsFound {
		return c.Secrets
	}
	all := stamp.Consumed(obj.GetAnnotations(), &tmpl.Spec, stamp.Options{Secrets: true})
	if rec, ok := stamp.ObservedFor(obj.GetAnnotations(), tmpl); ok && stamp.HasSecrets(all) {
		c.warn("whether Secrets count is taken from the workload's record (the registration can't be read; pass --secrets=true|false to say)")
		return rec.Secrets
	}
	return c.Secrets
}

// times reads what the watcher decides from without a certain basis.
func (c *Cluster) times(ctx context.Context, kind *workload.Kind, obj client.Object, ns *corev1.Namespace, nsKnown bool) *Times {
	t := &Times{Coverage: c.readCoverage(ctx)}
	since, ok, err := kind.PodsSince(ctx, c.Client, obj)
	if err != nil {
		t.PodsErr = err.Error()
	}
	t.PodsSince, t.PodsKnown = since, ok
	if c.Scope.Namespaced() {
		t.Watched, t.NamespaceIncluded = true, c.Scope.Includes(obj.GetNamespace(), nil)
	} else if nsKnown {
		t.Namespace = ns
		t.NamespaceIncluded = c.Scope.Includes(ns.Name, ns.Labels)
	}
	return t
}

// live reads the sources and computes their digests with the stamp core the webhook's
// configread calls, under the namespace's key when the hash key can be read; else the
// webhook computes them (dryRunStamp). A source that may not be read is left out of
// Content (its requirements are then not judged).
func (c *Cluster) live(ctx context.Context, kind *workload.Kind, obj client.Object, refs []stamp.Source) (Live, error) {
	namespace := obj.GetNamespace()
	l := Live{Content: map[string]*corev1.ConfigMap{}, Complete: len(refs) == 0}
	if len(refs) == 0 {
		return l, nil
	}
	hashKey := c.hashKey(ctx)
	var nsKey []byte
	if hashKey != nil {
		nsKey = stamp.NamespaceKey(hashKey, namespace)
	}
	stored := ""
	if tmpl := kind.Template(obj); tmpl != nil {
		stored = tmpl.Annotations[stamp.SourcesAnnotation]
	}
	lookup := configread.LookupOver(c.Client, namespace, stored, nsKey)
	readable := true
	for _, ref := range refs {
		cm, err := lookup(ctx, ref.Kind, ref.Name)
		if apierrors.IsForbidden(err) {
			// Many users may not read Secrets: the others are still read.
			c.warn("no access to %s in namespace %s: its content is not shown", ref.ID(), namespace)
			readable = false
			continue
		}
		if err != nil {
			return Live{}, describe(err, ref.ID(), namespace)
		}
		l.Content[ref.ID()] = cm
	}
	if k := hashKey; k != nil && readable {
		// The digests of the content just read (each source is read once).
		st, err := stamp.Compute(ctx, refs, func(_ context.Context, kind, name string) (*corev1.ConfigMap, error) {
			return l.Content[kind+"/"+name], nil
		}, stamp.NamespaceKey(k, namespace))
		if err != nil {
			return Live{}, err
		}
		l.Stamp, l.Complete, l.nsKey = st, true, stamp.NamespaceKey(k, namespace)
		return l, nil
	}
	st, err := c.dryRunStamp(ctx, kind, obj, refs, l.Content)
	if err != nil {
		c.warn("digests can't be compared: %v", err)
		return l, nil
	}
	l.Stamp, l.Complete = st, true
	return l, nil
}

// hashKey reads the installation's hash key, nil when it cannot (most users may not
// read it: then the webhook's dry-run computes the digests).
func (c *Cluster) hashKey(ctx context.Context) []byte {
	if c.HashKey == nil {
		return nil
	}
	var sec corev1.Secret
	if err := c.Client.Get(ctx, *c.HashKey, &sec); err != nil {
		if !apierrors.IsForbidden(err) {
			c.warn("cannot read the hash key Secret %s: %v; asking the webhook instead", c.HashKey, err)
		}
		return nil
	}
	if k := sec.Data[hashkey.DataKey]; len(k) == hashkey.Size {
		return k
	}
	c.warn("Secret %s holds no valid hash key; asking the webhook instead", c.HashKey)
	return nil
}

// Impact lists the workloads of every kind in namespace that consume kind/name.
func (c *Cluster) Impact(ctx context.Context, kinds []*workload.Kind, kind, namespace, name, key string) (ImpactReport, error) {
	ns, nsKnown, err := c.namespace(ctx, namespace)
	if err != nil {
		return ImpactReport{}, err
	}
	src, err := configread.Lookup(c.Client, namespace)(ctx, kind, name)
	switch {
	case apierrors.IsForbidden(err):
		c.warn("no access to %s/%s in namespace %s: whether it is ignored (%s) is not known", kind, name, namespace, stamp.IgnoreAnnotation)
	case err != nil:
		return ImpactReport{}, describe(err, kind+"/"+name, namespace)
	case src == nil:
		c.warn("%s/%s does not exist in namespace %s: listing the workloads that refer to it", kind, name, namespace)
	}
	var cands []Candidate
	var forbidden error
	listed := false
	owners := map[types.UID]map[string]string{}
	for _, k := range kinds {
		list := k.NewList()
		if err := c.Client.List(ctx, list, client.InNamespace(namespace)); err != nil {
			if apimeta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
				continue // the kind is not installed (Argo Rollouts)
			}
			if apierrors.IsForbidden(err) {
				c.warn("cannot list %s in namespace %s (forbidden): they are not shown", k.Resource, namespace)
				forbidden = err
				continue
			}
			return ImpactReport{}, describe(err, k.Resource, namespace)
		}
		listed = true
		items := k.Items(list)
		// The registration is read only for a kind with workloads here.
		notCovered := len(items) > 0 && c.kindNotCovered(ctx, k)
		for _, obj := range items {
			c.ownerAnnotations(ctx, k, obj, owners) // a Job takes its CronJob's extra sources, as the webhook stamped it
			cand := Candidate{Kind: k, Object: obj, KindNotCovered: notCovered}
			cand.InScope, cand.ScopeUnknown = c.inScope(ns, nsKnown, obj)
			if tmpl := k.Template(obj); tmpl != nil {
				secrets := c.secretsCount(ctx, obj, tmpl)
				cand.Secrets = &secrets
			}
			cands = append(cands, cand)
		}
	}
	if !listed && forbidden != nil {
		return ImpactReport{}, describe(forbidden, "any workload kind", namespace)
	}
	binaryKey := false
	if src != nil {
		_, inData := src.Data[key]
		_, inBinary := src.BinaryData[key]
		binaryKey = key != "" && inBinary && !inData
	}
	r := Impact(kind, namespace, name, key, stamp.Ignored(src), binaryKey, c.options(c.Secrets), cands)
	if src != nil && (kind == stamp.KindConfigMap || kind == stamp.KindSecret) {
		c.impactWaves(ctx, kinds, ns, nsKnown, &r)
	}
	return r, nil
}

// describe turns an API error into one a user can act on.
func describe(err error, what, namespace string) error {
	where := ""
	if namespace != "" {
		where = " in namespace " + namespace
	}
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s not found%s", what, where)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("no access to %s%s: %w", what, where, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("not authenticated to read %s%s (check your kubeconfig's credentials): %w", what, where, err)
	case apimeta.IsNoMatchError(err):
		return fmt.Errorf("%s: the kind is not installed in this cluster: %w", what, err)
	case apierrors.ReasonForError(err) == "" && !apierrors.IsTimeout(err):
		return fmt.Errorf("cannot reach the cluster to read %s%s: %w", what, where, err)
	}
	return fmt.Errorf("read %s%s: %w", what, where, err)
}
