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
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/internal/decide"
	"github.com/configstamp/configstamp/internal/hashkey"
	"github.com/configstamp/configstamp/internal/scope"
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
	// HashKey names the Secret holding the installation's hash key (the server's
	// --hash-key); nil or unreadable: the webhook computes the digests (a dry-run).
	HashKey *types.NamespacedName
	// SecretsSet: Secrets was given explicitly (it then wins over a record's flag when
	// the registration can't be read).
	SecretsSet bool
	// Registration names the MutatingWebhookConfiguration (the server's
	// --registration-name): its configstamp.io/covered-since tells whether Secrets
	// count (key "secrets") and since when each kind is stamped.
	Registration string
	// RollStale: the server runs with --roll-stale-at-install.
	RollStale bool
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
func (c *Cluster) Explain(ctx context.Context, kind *workload.Kind, namespace, name string) (Report, error) {
	obj := kind.New()
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj); err != nil {
		return Report{}, describe(err, strings.ToLower(kind.Kind)+"/"+name, namespace)
	}
	in := Input{Kind: kind, Object: obj, NamespaceLabel: c.Scope.Label, RollStale: c.RollStale}
	ns, known, err := c.namespace(ctx, obj.GetNamespace())
	if err != nil {
		return Report{}, err
	}
	in.InScope, in.ScopeUnknown = c.inScope(ns, known, obj)
	in.KindNotCovered = c.kindNotCovered(ctx, kind)
	tmpl := kind.Template(obj)
	if tmpl != nil {
		in.Options = stamp.Options{Secrets: c.secretsCount(ctx, obj, tmpl)}
		refs := stamp.Consumed(obj.GetAnnotations(), &tmpl.Spec, in.Options)
		if in.Live, err = c.live(ctx, kind, obj, refs); err != nil {
			return Report{}, err
		}
		// The times: what the watcher decides from without a valid record, and what
		// "written since" compares with.
		in.Times = c.times(ctx, kind, obj, ns, known)
	}
	var evs corev1.EventList
	if err := c.Client.List(ctx, &evs, client.InNamespace(namespace), client.MatchingFields{
		"involvedObject.name": name, "involvedObject.kind": kind.Kind,
	}); err != nil {
		c.warn("cannot list Events: %v", err)
	}
	in.Events = evs.Items
	return Explain(in), nil
}

// inScope says whether obj is in scope, from its namespace ns (known: ns could be read)
// and its own labels; unknown when that cannot be told.
func (c *Cluster) inScope(ns *corev1.Namespace, known bool, obj client.Object) (in, unknown bool) {
	switch {
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

// namespace reads a namespace; known is false when it may not be read.
func (c *Cluster) namespace(ctx context.Context, name string) (*corev1.Namespace, bool, error) {
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

// readCoverage reads the registration's coverage annotation once; nil when it can't.
func (c *Cluster) readCoverage(ctx context.Context) map[string]time.Time {
	if c.coverageRead {
		return c.coverage
	}
	c.coverageRead = true
	name := c.Registration
	if name == "" {
		name = "configstamp"
	}
	var reg admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, &reg); err != nil {
		if apierrors.IsNotFound(err) {
			c.warn("the registration %s (MutatingWebhookConfiguration) does not exist: is --registration-name the server's? (without it the watcher takes every unstamped workload as installed over)", name)
		} else {
			c.warn("cannot read the registration %s (MutatingWebhookConfiguration; --registration-name): %v", name, apierrors.ReasonForError(err))
		}
		return nil
	}
	m, err := decide.ParseCoverage(reg.Annotations[stamp.CoverageAnnotation])
	if err != nil {
		c.warn("the registration %s's %s can't be read: %v", name, stamp.CoverageAnnotation, err)
	}
	// Since when each is covered, as the watcher reads it (decide.CoveredSince).
	cov := map[string]time.Time{}
	for _, k := range append(slices.Collect(maps.Keys(m)), workload.Deployment.Resource) {
		cov[k] = decide.CoveredSince(reg.CreationTimestamp.Time, m, k)
	}
	c.coverage = cov
	return cov
}

// secretsCount tells whether Secrets count for the workload: as the registration's
// coverage says (key "secrets"); if it can't be read, as --secrets says when given,
// else as the workload's valid record says (when it consumes a Secret), else not.
func (c *Cluster) secretsCount(ctx context.Context, obj client.Object, tmpl *corev1.PodTemplateSpec) bool {
	if cov := c.readCoverage(ctx); cov != nil {
		_, on := cov[decide.CoverageSecrets]
		return on
	}
	if c.SecretsSet {
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
	if nsKnown {
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
	lookup := configread.Lookup(c.Client, namespace)
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
	if k := c.hashKey(ctx); k != nil && readable {
		// The digests of the content just read (each source is read once).
		st, err := stamp.Compute(ctx, refs, func(_ context.Context, kind, name string) (*corev1.ConfigMap, error) {
			return l.Content[kind+"/"+name], nil
		}, stamp.NamespaceKey(k, namespace))
		if err != nil {
			return Live{}, err
		}
		l.Stamp, l.Complete = st, true
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
	return Impact(kind, namespace, name, key, stamp.Ignored(src), binaryKey, stamp.Options{Secrets: c.Secrets}, cands), nil
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
