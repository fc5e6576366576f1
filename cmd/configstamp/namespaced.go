package main

import (
	"errors"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// A namespaced install (--watch-namespaces) acts in a list of namespaces under Roles
// alone: it reads no Namespace and nothing cluster-wide (coverage is kept on the
// ConfigMap --coverage-configmap instead of the registration), and its caches hold
// those namespaces only.

// validateNamespaced checks the flags of a namespaced install against each other.
func (o *options) validateNamespaced() error {
	if o.watchNamespaces == "" {
		if o.coverageConfigMap != "" {
			return errors.New("--coverage-configmap is for a namespaced install (--watch-namespaces)")
		}
		return nil
	}
	if o.coverageConfigMap == "" {
		return errors.New("--watch-namespaces needs --coverage-configmap NAMESPACE/NAME (the chart's)")
	}
	if _, err := parseRef("--coverage-configmap", o.coverageConfigMap); err != nil {
		return err
	}
	if o.certs.enabled() {
		// Both modes write the registration's caBundle: a cluster-wide grant.
		return errors.New("--watch-namespaces excludes --self-signed-secret and --tls-secret: a namespaced install may not write its registration; serve the files in --webhook-cert-dir (cert-manager's Secret mounted, its CA injector keeping the caBundle)")
	}
	return nil
}

// watched is the --watch-namespaces list as given (the scope drops the excluded ones).
func (o *options) watched() []string {
	if o.watchNamespaces == "" {
		return nil
	}
	return strings.Split(o.watchNamespaces, ",")
}

// cacheNamespaces scopes the manager's caches (the watcher's informers and field
// indexes) to the watched namespaces; nil: cluster-wide.
func cacheNamespaces(watched []string) map[string]cache.Config {
	if len(watched) == 0 {
		return nil
	}
	out := map[string]cache.Config{}
	for _, ns := range watched {
		out[ns] = cache.Config{}
	}
	return out
}

// neededIn is needed for a namespaced install: the same grants on workloads and sources
// in each watched namespace, no Namespace read, and the coverage ConfigMap in place of
// the registration; the hash key Secret as in needed.
func neededIn(kinds []*workload.Kind, sources stamp.Options, metricsSecure bool, watched []string, coverage, hashKey types.NamespacedName) []access {
	out := keyAccess(hashKey)
	for _, ns := range watched {
		var in []access
		in = append(in, sourceAccess(sources, false)...)
		in = append(in, access{"apps", "replicasets", "list", "", ""}, access{"apps", "controllerrevisions", "list", "", ""})
		for _, k := range workload.Watched(kinds) {
			for _, verb := range []string{"get", "list", "watch", "patch"} {
				in = append(in, access{k.Group, k.Resource, verb, "", ""})
			}
		}
		in = append(in, sourceAccess(sources, true)...)
		for i := range in {
			in[i].namespace = ns
		}
		out = append(out, in...)
	}
	for _, verb := range []string{"get", "patch"} {
		out = append(out, access{"", "configmaps", verb, coverage.Name, coverage.Namespace})
	}
	if metricsSecure {
		out = append(out, access{"authentication.k8s.io", "tokenreviews", "create", "", ""}, access{"authorization.k8s.io", "subjectaccessreviews", "create", "", ""})
	}
	return out
}

// coverageConfigMap is --coverage-configmap (zero without).
func (s *setup) coverageConfigMap() types.NamespacedName {
	if s.o.coverageConfigMap == "" {
		return types.NamespacedName{}
	}
	ref, _ := parseRef("--coverage-configmap", s.o.coverageConfigMap)
	return ref
}
