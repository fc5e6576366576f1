package watcher

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"

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
