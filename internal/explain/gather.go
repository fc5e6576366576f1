package explain

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/configread"
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
	// Secrets: Secrets count, as with the server's --secrets. A workload whose stamp
	// holds Secret digests is judged with Secrets counting in any case.
	Secrets bool
	// HashKey names the Secret holding the hash key of Secret digests (the server's
	// --secret-hash-key); nil: Secret digests are not compared.
	HashKey *types.NamespacedName
	// Warn receives what the report could not take into account.
	Warn func(string)
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
	in := Input{Kind: kind, Object: obj, NamespaceLabel: c.Scope.Label}
	var err error
	if in.InScope, err = c.inScope(ctx, obj); err != nil {
		return Report{}, err
	}
	tmpl := kind.Template(obj)
	if tmpl != nil {
		in.Options = stamp.Options{Secrets: c.Secrets || strings.Contains(tmpl.Annotations[stamp.SourcesAnnotation], stamp.KindSecret+"/")}
		refs := stamp.Consumed(obj.GetAnnotations(), &tmpl.Spec, in.Options)
		if in.Live, err = c.live(ctx, namespace, refs); err != nil {
			return Report{}, err
		}
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

// inScope reads the workload's namespace and asks the scope.
func (c *Cluster) inScope(ctx context.Context, obj client.Object) (bool, error) {
	var ns corev1.Namespace
	if err := c.Client.Get(ctx, client.ObjectKey{Name: obj.GetNamespace()}, &ns); err != nil {
		if apierrors.IsForbidden(err) {
			c.warn("cannot read namespace %s (forbidden): whether it opts in is not known; judged by the workload's label alone", obj.GetNamespace())
			return c.Scope.Labelled(obj.GetLabels()), nil
		}
		return false, describe(err, "namespace/"+obj.GetNamespace(), "")
	}
	return c.Scope.IncludesWorkload(ns.Name, ns.Labels, obj.GetLabels()), nil
}

// live reads the sources and computes their digests with configread, the webhook's
// code. Without the hash key, Secrets are read for their keys but not digested.
func (c *Cluster) live(ctx context.Context, namespace string, refs []stamp.Source) (Live, error) {
	l := Live{Content: map[string]*corev1.ConfigMap{}, Complete: true}
	lookup := configread.Lookup(c.Client, namespace)
	secretsReadable := true
	for _, ref := range refs {
		cm, err := lookup(ctx, ref.Kind, ref.Name)
		if ref.Kind == stamp.KindSecret && apierrors.IsForbidden(err) {
			// Many users may not read Secrets: compare the ConfigMaps.
			c.warn("Secret digests can't be compared: no access to %s in namespace %s", ref.ID(), namespace)
			secretsReadable = false
			continue
		}
		if err != nil {
			return Live{}, describe(err, ref.ID(), namespace)
		}
		l.Content[ref.ID()] = cm
	}
	var key func() []byte
	if stamp.HasSecrets(refs) {
		var k []byte
		if secretsReadable {
			k = c.hashKey(ctx)
		}
		if k == nil {
			l.Complete = false
			var cms []stamp.Source
			for _, ref := range refs {
				if ref.Kind != stamp.KindSecret {
					cms = append(cms, ref)
				}
			}
			refs = cms
		}
		key = func() []byte { return k }
	}
	reader := &configread.Reader{Client: c.Client, Key: key}
	st, err := reader.Stamp(ctx, namespace, refs)
	if err != nil {
		return Live{}, err
	}
	l.Stamp = st
	return l, nil
}

// hashKey reads the hash key of Secret digests, nil when it cannot.
func (c *Cluster) hashKey(ctx context.Context) []byte {
	if c.HashKey == nil {
		c.warn("Secret digests can't be compared: no --secret-hash-key given")
		return nil
	}
	var sec corev1.Secret
	if err := c.Client.Get(ctx, *c.HashKey, &sec); err != nil {
		c.warn("Secret digests can't be compared: cannot read the hash key Secret %s: %v", c.HashKey, err)
		return nil
	}
	if k := sec.Data[hashkey.DataKey]; len(k) == hashkey.Size {
		return k
	}
	c.warn("Secret digests can't be compared: Secret %s holds no valid key", c.HashKey)
	return nil
}

// Impact lists the workloads of every kind in namespace that consume kind/name.
func (c *Cluster) Impact(ctx context.Context, kinds []*workload.Kind, kind, namespace, name, key string) (ImpactReport, error) {
	var ns corev1.Namespace
	nsKnown := true
	if err := c.Client.Get(ctx, client.ObjectKey{Name: namespace}, &ns); err != nil {
		if !apierrors.IsForbidden(err) {
			return ImpactReport{}, describe(err, "namespace/"+namespace, "")
		}
		nsKnown = false
		c.warn("cannot read namespace %s (forbidden): judged by each workload's label alone", namespace)
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
	for _, k := range kinds {
		list := k.NewList()
		if err := c.Client.List(ctx, list, client.InNamespace(namespace)); err != nil {
			if apimeta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
				continue // the kind is not installed (Argo Rollouts)
			}
			return ImpactReport{}, describe(err, k.Resource, namespace)
		}
		for _, obj := range k.Items(list) {
			in := c.Scope.Labelled(obj.GetLabels())
			if nsKnown {
				in = c.Scope.IncludesWorkload(ns.Name, ns.Labels, obj.GetLabels())
			}
			cands = append(cands, Candidate{Kind: k, Object: obj, InScope: in})
		}
	}
	return Impact(kind, namespace, name, key, stamp.Ignored(src), stamp.Options{Secrets: c.Secrets}, cands), nil
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
