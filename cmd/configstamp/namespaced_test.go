package main

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// A namespaced install is asked for namespace by namespace, and for nothing
// cluster-wide: no Namespace, no registration.
func TestNeededIn(t *testing.T) {
	var got []string
	for _, a := range neededIn([]*workload.Kind{workload.Deployment}, stamp.Options{Secrets: true}, false, []string{"a", "b"},
		types.NamespacedName{Namespace: "cs", Name: "configstamp-coverage"}, types.NamespacedName{Namespace: "cs", Name: "configstamp-hash-key"}) {
		if a.namespace == "" {
			t.Errorf("cluster-wide: %s", a)
		}
		got = append(got, a.String())
	}
	in := func(ns string) string {
		return strings.NewReplacer("@", " in namespace "+ns).Replace("get configmaps@, list configmaps@, watch configmaps@, " +
			"list replicasets.apps@, list controllerrevisions.apps@, " +
			"get deployments.apps@, list deployments.apps@, watch deployments.apps@, patch deployments.apps@, " +
			"get secrets@, list secrets@, watch secrets@")
	}
	want := "get secrets/configstamp-hash-key in namespace cs, update secrets/configstamp-hash-key in namespace cs, " + in("a") + ", " + in("b") + ", get configmaps/configstamp-coverage in namespace cs, patch configmaps/configstamp-coverage in namespace cs"
	if g := strings.Join(got, ", "); g != want {
		t.Errorf("\n got %s\nwant %s", g, want)
	}
}

func TestFlagsNamespaced(t *testing.T) {
	o, err := parse("--watch-namespaces", "a,b", "--coverage-configmap", "cs/configstamp-coverage")
	if err != nil {
		t.Fatal(err)
	}
	if w := o.watched(); len(w) != 2 || len(cacheNamespaces(w)) != 2 {
		t.Fatalf("watched %v", w)
	}
	for _, args := range [][]string{
		{"--watch-namespaces", "a"},
		{"--coverage-configmap", "cs/x"},
		{"--watch-namespaces", "a", "--coverage-configmap", "x"},
		{"--watch-namespaces", "a", "--coverage-configmap", "cs/x", "--tls-secret", "cs/tls"},
		{"--watch-namespaces", "a", "--coverage-configmap", "cs/x", "--self-signed-secret", "cs/tls", "--self-signed-hosts", "h"},
	} {
		if _, err := parse(args...); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	if o, _ := parse(); o.watched() != nil || cacheNamespaces(o.watched()) != nil {
		t.Error("a cluster-wide install got a namespace list")
	}
}
