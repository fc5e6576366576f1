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

// TestNeededByWebhook: the webhook role asks for no workload, no list or watch of a
// source and nothing of the registration; a namespaced one no Namespace.
func TestNeededByWebhook(t *testing.T) {
	key := types.NamespacedName{Namespace: "cs", Name: "key"}
	list := func(watched []string) string {
		var out []string
		for _, a := range neededByWebhook(stamp.Options{Secrets: true}, false, watched, key) {
			out = append(out, a.String())
		}
		return strings.Join(out, ", ")
	}
	if got, want := list(nil), "get secrets/key in namespace cs, update secrets/key in namespace cs, get configmaps, get secrets, get cronjobs.batch, list namespaces, watch namespaces"; got != want {
		t.Errorf("cluster-wide:\n got %s\nwant %s", got, want)
	}
	if got, want := list([]string{"a"}), "get secrets/key in namespace cs, update secrets/key in namespace cs, get configmaps in namespace a, get secrets in namespace a, get cronjobs.batch in namespace a"; got != want {
		t.Errorf("namespaced:\n got %s\nwant %s", got, want)
	}
}
