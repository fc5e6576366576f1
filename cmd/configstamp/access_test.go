package main

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// TestNeeded: the source kinds' permissions where they always were: ConfigMaps first,
// Secrets (a flag's) after the workload kinds; of the hash key Secret, get and update
// only (no create: the chart creates it).
func TestNeeded(t *testing.T) {
	list := func(opts stamp.Options) string {
		var out []string
		for _, a := range needed([]*workload.Kind{workload.Deployment}, opts, false, "reg", types.NamespacedName{Namespace: "cs", Name: "key"}) {
			out = append(out, a.String())
		}
		return strings.Join(out, ", ")
	}
	base := "get configmaps, list configmaps, watch configmaps, get secrets/key in namespace cs, update secrets/key in namespace cs, list namespaces, watch namespaces, " +
		"list replicasets.apps, list controllerrevisions.apps, get mutatingwebhookconfigurations.admissionregistration.k8s.io/reg, " +
		"patch mutatingwebhookconfigurations.admissionregistration.k8s.io/reg, " +
		"get deployments.apps, list deployments.apps, watch deployments.apps, patch deployments.apps"
	if got := list(stamp.Options{}); got != base {
		t.Errorf("without Secrets:\n got %s\nwant %s", got, base)
	}
	if got, want := list(stamp.Options{Secrets: true}), base+", get secrets, list secrets, watch secrets"; got != want {
		t.Errorf("with Secrets:\n got %s\nwant %s", got, want)
	}
}
