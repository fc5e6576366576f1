package watcher

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/configstamp/configstamp/internal/flux"
	"github.com/configstamp/configstamp/stamp"
)

// TestSourceDetectorWaitsForStatuses: the CSI source kind's controller also watches the
// driver's pod statuses, so it is set up only once both CRDs are served (a watch of a
// resource not served would fail the manager).
func TestSourceDetectorWaitsForStatuses(t *testing.T) {
	k := stamp.SecretProviderClass
	d := (&watcher{}).sourceDetector(k)
	for _, tc := range []struct {
		name      string
		resources []string
		want      bool
	}{
		{"none", nil, false},
		{"the classes only", []string{k.Resource}, false},
		{"the statuses only", []string{k.Statuses}, false},
		{"both", []string{k.Resource, k.Statuses}, true},
	} {
		list := &metav1.APIResourceList{GroupVersion: k.Group + "/" + k.Version}
		for _, r := range tc.resources {
			list.APIResources = append(list.APIResources, metav1.APIResource{Name: r, Namespaced: true})
		}
		d.discovery = &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{Resources: []*metav1.APIResourceList{list}}}
		if got := d.served(context.Background()); got != tc.want {
			t.Errorf("%s: served %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestDetectorOtherVersions: a cluster whose Flux serves HelmReleases at v2beta2 only
// (Flux 2.2) is told once, at the default log level, that they are not watched, with
// the versions served; checked again, it says nothing more until that changes; and once
// v2 is served, the kind is served.
func TestDetectorOtherVersions(t *testing.T) {
	var lines []string
	ctx := logf.IntoContext(context.Background(), funcr.New(func(prefix, args string) {
		lines = append(lines, args)
	}, funcr.Options{Verbosity: 0}))
	d := &kindDetector{kind: flux.Kind, gvr: flux.HelmRelease}
	group := flux.HelmRelease.Group
	serve := func(versions ...string) {
		fake := &clienttesting.Fake{}
		for _, v := range versions {
			fake.Resources = append(fake.Resources, &metav1.APIResourceList{GroupVersion: group + "/" + v,
				APIResources: []metav1.APIResource{{Name: "helmreleases", Namespaced: true, Kind: "HelmRelease"}}})
		}
		d.discovery = &fakediscovery.FakeDiscovery{Fake: fake}
	}
	for _, step := range []struct {
		versions []string
		served   bool
		logged   string // a new line naming these versions; "": none
	}{
		{nil, false, ""},
		{[]string{"v2beta1", "v2beta2"}, false, `"served"=["v2beta1" "v2beta2"]`},
		{[]string{"v2beta1", "v2beta2"}, false, ""},
		{[]string{"v2beta2"}, false, `"served"=["v2beta2"]`},
		{[]string{"v2beta2", "v2"}, true, ""},
	} {
		before := len(lines)
		serve(step.versions...)
		if got := d.served(ctx); got != step.served {
			t.Fatalf("%v: served %v, want %v", step.versions, got, step.served)
		}
		switch added := lines[before:]; {
		case step.logged == "" && len(added) > 0:
			t.Fatalf("%v: logged %q", step.versions, added)
		case step.logged != "" && (len(added) != 1 || !strings.Contains(added[0], step.logged) || !strings.Contains(added[0], `"needed"="v2"`)):
			t.Fatalf("%v: logged %q, want one line with %s", step.versions, added, step.logged)
		}
	}
}
