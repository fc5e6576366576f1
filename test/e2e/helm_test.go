package e2e

import (
	"path/filepath"
	"testing"

	"github.com/configstamp/configstamp/test/cluster"
)

// TestHelmfileTwoReleases is the case configstamp exists for: one release renders the
// gateway's Deployment, another renders its API definitions as ConfigMaps, and the
// gateway chart has no checksum annotation.
func TestHelmfileTwoReleases(t *testing.T) {
	t.Parallel()
	dir := copyTestdata(t)
	ns := env.NewNamespace(t, true)
	sync := func() {
		tool(t, dir, []string{"NAMESPACE=" + ns}, "helmfile", "sync", "--file", "helmfile.yaml.gotmpl")
	}

	sync()
	first := expectReplicaSets(t, ns, "gateway", 1)
	if hashOf(first) == "" {
		t.Fatal("first helmfile sync: gateway not stamped")
	}
	audited(t, ns, "gateway", cluster.AdminUser, "", hashOf(first))

	// Edit one definition file: exactly one new ReplicaSet, and the sources annotation
	// says which ConfigMap changed.
	writeFile(t, filepath.Join(dir, "charts/gateway-apis/apis/orders.yaml"), "routes:\n- path: /orders\n  backend: orders-v2:8080\n")
	sync()
	edited := expectReplicaSets(t, ns, "gateway", 2)
	if hashOf(edited) == hashOf(first) {
		t.Fatal("stamp unchanged after a definition edit")
	}
	before, after := sourcesOf(first), sourcesOf(edited)
	if before["configmap/gateway-apis-orders"] == after["configmap/gateway-apis-orders"] ||
		before["configmap/gateway-apis-payments"] != after["configmap/gateway-apis-payments"] {
		t.Fatalf("sources do not single out the edited definition: %v -> %v", before, after)
	}
	audited(t, ns, "gateway", cluster.ConfigstampUser, hashOf(first), hashOf(edited))

	// Nothing changed: zero new ReplicaSets.
	sync()
	same := expectReplicaSets(t, ns, "gateway", 2)
	if hashOf(same) != hashOf(edited) {
		t.Fatal("stamp changed on a no-op sync")
	}

	// A new definition file and the volume that mounts it: exactly one rollout, and the
	// stamp covers the new ConfigMap.
	writeFile(t, filepath.Join(dir, "charts/gateway-apis/apis/invoices.yaml"), "routes:\n- path: /invoices\n  backend: invoices:8080\n")
	writeFile(t, filepath.Join(dir, "values/gateway.yaml"), "apis: [orders, payments, invoices]\n")
	sync()
	grown := expectReplicaSets(t, ns, "gateway", 3)
	if d := sourcesOf(grown)["configmap/gateway-apis-invoices"]; d == "" || d == "missing" {
		t.Fatalf("stamp does not cover the new definition: %v", sourcesOf(grown))
	}
	audited(t, ns, "gateway", cluster.AdminUser, hashOf(same), hashOf(grown))
}

// TestHelmOneReleaseChangingBoth: one helm upgrade that changes the ConfigMap data and
// the Deployment template rolls once (tools that react after the fact roll twice).
func TestHelmOneReleaseChangingBoth(t *testing.T) {
	t.Parallel()
	dir := copyTestdata(t)
	ns := env.NewNamespace(t, true)
	helm := func(args ...string) {
		tool(t, dir, nil, "helm", append([]string{"upgrade", "--install", "app", "./charts/app", "--namespace", ns}, args...)...)
	}
	helm()
	first := expectReplicaSets(t, ns, "app", 1)

	helm("--set", "logLevel=debug", "--set", "image=registry.example/app:1.1")
	both := expectReplicaSets(t, ns, "app", 2)
	if hashOf(both) == hashOf(first) {
		t.Fatal("stamp unchanged after a config change")
	}
	audited(t, ns, "app", cluster.AdminUser, hashOf(first), hashOf(both))

	// No fights with helm: an upgrade with unchanged values keeps the stamp and rolls
	// nothing.
	helm("--set", "logLevel=debug", "--set", "image=registry.example/app:1.1")
	same := expectReplicaSets(t, ns, "app", 2)
	if hashOf(same) != hashOf(both) {
		t.Fatalf("helm upgrade with unchanged values changed the stamp: %s -> %s", hashOf(both), hashOf(same))
	}
}
