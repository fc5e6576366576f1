package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/flux"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// access is one permission configstamp needs, cluster-wide (on one object when name is
// set; in one namespace when namespace is set).
type access struct{ group, resource, verb, name, namespace string }

func (a access) String() string {
	r := a.resource
	if a.group != "" {
		r += "." + a.group
	}
	if a.name != "" {
		r += "/" + a.name
	}
	if a.namespace != "" {
		r += " in namespace " + a.namespace
	}
	return a.verb + " " + r
}

// needed lists what the watcher cannot work without: without list and watch of a kind,
// its cache never syncs and the watcher never starts (while the webhook serves on, so the
// gap would go unnoticed).
// Its registration is read and annotated too (since when each kind is covered), and the
// hash key Secret read and, when empty, filled (get and update on that one Secret: the
// chart creates it, so configstamp needs no Secret create).
func needed(kinds []*workload.Kind, sources stamp.Options, metricsSecure bool, registration string, hashKey types.NamespacedName) []access {
	out := append(sourceAccess(sources, false), keyAccess(hashKey)...)
	out = append(out,
		access{"", "namespaces", "list", "", ""}, access{"", "namespaces", "watch", "", ""},
		access{"apps", "replicasets", "list", "", ""}, access{"apps", "controllerrevisions", "list", "", ""},
		access{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get", registration, ""},
		access{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", "patch", registration, ""},
	)
	for _, k := range workload.Watched(kinds) {
		for _, verb := range []string{"get", "list", "watch", "patch"} {
			out = append(out, access{k.Group, k.Resource, verb, "", ""})
		}
	}
	out = append(out, sourceAccess(sources, true)...)
	if metricsSecure {
		out = append(out, access{"authentication.k8s.io", "tokenreviews", "create", "", ""}, access{"authorization.k8s.io", "subjectaccessreviews", "create", "", ""})
	}
	return out
}

// helmReleaseAccess is what --flux-helmreleases adds: read and patch HelmReleases,
// cluster-wide or in each watched namespace.
func helmReleaseAccess(watched []string) []access {
	namespaces := watched
	if len(namespaces) == 0 {
		namespaces = []string{""} // cluster-wide
	}
	var out []access
	for _, ns := range namespaces {
		for _, verb := range []string{"get", "list", "watch", "patch"} {
			out = append(out, access{flux.HelmRelease.Group, flux.HelmRelease.Resource, verb, "", ns})
		}
	}
	return out
}

// neededByWebhook is what the webhook role alone needs: get of the sources that count
// (its live reads; list of a kind's Statuses, read for its content) and of CronJobs (a
// Job's owner), the hash key Secret, and (cluster-wide) list and watch of Namespaces
// for its scope check; nothing else of workloads, and no list or watch of sources. In a
// namespaced install (watched set) the sources are read in those namespaces only and no
// Namespace is read.
func neededByWebhook(sources stamp.Options, metricsSecure bool, watched []string, hashKey types.NamespacedName) []access {
	out := keyAccess(hashKey)
	var get []access
	for _, a := range append(sourceAccess(sources, false), sourceAccess(sources, true)...) {
		if a.verb == "get" || (a.verb == "list" && statusesResource(a.resource)) {
			get = append(get, a)
		}
	}
	// A Job's CronJob, read at the Job's CREATE for its annotations (Stamper.owner).
	get = append(get, access{workload.CronJob.Group, workload.CronJob.Resource, "get", "", ""})
	if len(watched) == 0 {
		out = append(out, get...)
		out = append(out, access{"", "namespaces", "list", "", ""}, access{"", "namespaces", "watch", "", ""})
	}
	for _, ns := range watched {
		for _, a := range get {
			a.namespace = ns
			out = append(out, a)
		}
	}
	if metricsSecure {
		out = append(out, access{"authentication.k8s.io", "tokenreviews", "create", "", ""}, access{"authorization.k8s.io", "subjectaccessreviews", "create", "", ""})
	}
	return out
}

// keyAccess is what keeping the hash key Secret needs: get, and update to fill it when
// the chart created it empty.
func keyAccess(hashKey types.NamespacedName) []access {
	return []access{{"", "secrets", "get", hashKey.Name, hashKey.Namespace}, {"", "secrets", "update", hashKey.Name, hashKey.Namespace}}
}

// sourceAccess is what reading and watching the source kinds that count needs: those
// always on, or (flagged) those a flag turns on, which needed lists last.
func sourceAccess(sources stamp.Options, flagged bool) []access {
	var out []access
	for _, k := range stamp.SourceKinds() {
		if k.Counts(sources) && (k.Flag != "") == flagged {
			for _, verb := range []string{"get", "list", "watch"} {
				out = append(out, access{k.Group, k.Resource, verb, "", ""})
				if k.Statuses != "" {
					out = append(out, access{k.Group, k.Statuses, verb, "", ""})
				}
			}
		}
	}
	return out
}

// checkAccess asks the API server (SelfSubjectAccessReviews, which every authenticated
// user may create by default) whether configstamp has every permission in want, and
// returns an error naming the missing ones. When the question itself cannot be asked,
// it returns nil and the reason: the caller logs it and starts anyway.
func checkAccess(ctx context.Context, c client.Client, want []access) (missing error, unchecked error) {
	var denied []string
	for _, a := range want {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Group: a.group, Resource: a.resource, Verb: a.verb, Name: a.name, Namespace: a.namespace},
		}}
		if err := c.Create(ctx, review); err != nil {
			return nil, fmt.Errorf("ask whether configstamp may %s: %w", a, err)
		}
		if !review.Status.Allowed {
			denied = append(denied, a.String())
		}
	}
	if len(denied) > 0 {
		return fmt.Errorf("configstamp may not %s: grant them (the chart's ClusterRole does, or in a namespaced install its Roles), or turn off what needs them", strings.Join(denied, ", ")), nil
	}
	return nil, nil
}

// statusesResource reports whether resource is a source kind's Statuses.
func statusesResource(resource string) bool {
	return slices.ContainsFunc(stamp.SourceKinds(), func(k *stamp.SourceKind) bool { return k.Statuses != "" && k.Statuses == resource })
}
