package watcher

import (
	"context"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// detectInterval is how often the API is checked for a kind that is not served yet.
const detectInterval = 15 * time.Second

// kindDetector sets up the watch of a kind served by a CRD (Argo Rollouts, Flux
// HelmReleases) once the API server serves it: at start, or when the CRD is installed
// later. While it is absent it logs nothing (at the default level) and reports no error;
// while its group is served at other versions only (Flux 2.2 serves HelmReleases at
// v2beta2, not v2) it says so once, at the default level, and goes on checking.
// It runs on the leader, as the controllers it sets up do.
type kindDetector struct {
	kind string // its Kind, in logs
	gvr  schema.GroupVersionResource
	// also are other resources of gvr's group and version the setup watches: it waits
	// for them too (a watch of a resource not served fails the manager).
	also      []string
	discovery discovery.DiscoveryInterface
	setup     func(context.Context) error
	// otherVersions are the versions of gvr's group last logged as served instead.
	otherVersions string
}

// Start polls discovery until the kind is served, then sets it up, then waits.
func (d *kindDetector) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("detect").WithValues("kind", d.kind, "group", d.gvr.Group)
	for {
		if d.served(ctx) {
			if err := d.setup(ctx); err != nil {
				return err
			}
			log.Info("Watching workloads of a kind now served by the API server")
			<-ctx.Done()
			return nil
		}
		log.V(1).Info("Kind not served (its CRD is not installed); checking again later", "interval", detectInterval.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(detectInterval):
		}
	}
}

// served reports whether the API server serves the kind's resource (and also). A transient error
// counts as not yet: it is asked again at the next interval.
func (d *kindDetector) served(ctx context.Context) bool {
	list, err := d.discovery.ServerResourcesForGroupVersion(d.gvr.GroupVersion().String())
	if err != nil {
		if !apierrors.IsNotFound(err) {
			logf.FromContext(ctx).V(1).Info("Discovery failed; checking again later", "error", err.Error())
			return false
		}
		d.logOtherVersions(ctx)
		return false
	}
	for _, want := range append([]string{d.gvr.Resource}, d.also...) {
		if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == want }) {
			return false
		}
	}
	return true
}

// logOtherVersions logs once (again when they change) the versions of the kind's group
// the API server serves when it does not serve the version configstamp reads: the kind
// is then not watched, which a user who enabled it should learn without raising the
// log level.
func (d *kindDetector) logOtherVersions(ctx context.Context) {
	groups, err := d.discovery.ServerGroups()
	if err != nil {
		return
	}
	var versions []string
	for _, g := range groups.Groups {
		if g.Name == d.gvr.Group {
			for _, v := range g.Versions {
				versions = append(versions, v.Version)
			}
		}
	}
	if got := strings.Join(versions, ","); got != d.otherVersions {
		d.otherVersions = got
		if got != "" {
			logf.FromContext(ctx).WithName("detect").Info("Kind not watched: its group is served at other versions only; checking again later",
				"kind", d.kind, "group", d.gvr.Group, "served", versions, "needed", d.gvr.Version)
		}
	}
}
