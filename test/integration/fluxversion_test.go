package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/configstamp/configstamp/test/framework"
)

// helmReleaseV2beta2CRD serves Flux HelmReleases at v2beta2 only, as Flux 2.2 and
// earlier do (a structural stand-in: configstamp reads v2 only).
const helmReleaseV2beta2CRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: helmreleases.helm.toolkit.fluxcd.io
spec:
  group: helm.toolkit.fluxcd.io
  names: {kind: HelmRelease, listKind: HelmReleaseList, plural: helmreleases, singular: helmrelease}
  scope: Namespaced
  versions:
  - name: v2beta2
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// TestFluxHelmReleasesOtherVersion: with --flux-helmreleases on a cluster that serves
// HelmReleases at v2beta2 only, configstamp runs on and says once, at info level, that
// they are not watched and which versions are served.
func TestFluxHelmReleasesOtherVersion(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "crd.yaml")
	if err := os.WriteFile(path, []byte(helmReleaseV2beta2CRD), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := env.InstallCRDs(bg, path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		crd := &unstructured.Unstructured{}
		crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
		crd.SetName("helmreleases.helm.toolkit.fluxcd.io")
		if err := k8s.Delete(bg, crd); err != nil {
			t.Errorf("delete crd: %v", err)
		}
	})
	// A watcher acting on workloads of a label no test sets, reading a registration no
	// test makes: it touches no other test's workloads and writes no coverage.
	cs := env.Start(t, framework.Options{NoWebhook: true, Args: []string{"--role", "watcher", "--flux-helmreleases",
		"--namespace-label", "configstamp.io/test-flux-version", "--registration-name", "configstamp-test-flux-version"}})
	const msg = "Kind not watched: its group is served at other versions only; checking again later"
	framework.Eventually(t, 2*time.Minute, "the log of HelmReleases not watched", func() error {
		select {
		case <-cs.Exited():
			return fmt.Errorf("configstamp exited:\n%s", cs.Output())
		default:
		}
		n := 0
		for _, rec := range cs.Logs() {
			if rec["msg"] == msg {
				if rec["level"] != "info" || fmt.Sprint(rec["served"]) != "[v2beta2]" || rec["needed"] != "v2" || rec["kind"] != "HelmRelease" {
					return fmt.Errorf("logged %v", rec)
				}
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("%d such lines", n)
		}
		return nil
	})
}
