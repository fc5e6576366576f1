package framework

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/configstamp/configstamp/internal/argo"
	"github.com/configstamp/configstamp/test/cluster"
)

// ArgoRolloutsCRD is the path of the Argo Rollouts CRD (argoproj.io/v1alpha1 Rollout)
// copied from the argo-rollouts module, for InstallCRDs.
func ArgoRolloutsCRD() string {
	return filepath.Join(cluster.RepoRoot(), "test", "testdata", "argo-rollouts", "rollout-crd.yaml")
}

var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// InstallCRDs applies the CustomResourceDefinitions in the YAML file at path and waits
// until each is Established and a fresh client maps its kind, so a client made afterwards
// can use it at once. It applies server-side, so tests may install the same CRDs
// concurrently or again. The CRDs are read unstructured: no apiextensions dependency.
func (e *Env) InstallCRDs(ctx context.Context, path string) error {
	crds, err := readCRDs(path)
	if err != nil {
		return err
	}
	for _, crd := range crds {
		if err := e.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(crd),
			client.FieldOwner("configstamp-test"), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply crd %s: %w", crd.GetName(), err)
		}
	}
	httpClient, err := rest.HTTPClientFor(e.Cluster.Config)
	if err != nil {
		return err
	}
	for _, crd := range crds {
		var last error
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			last = e.crdReady(ctx, crd.GetName(), httpClient)
			return last == nil, nil
		})
		if err != nil {
			return fmt.Errorf("crd %s not ready: %w (%w)", crd.GetName(), err, last)
		}
	}
	return nil
}

// crdReady says why the CRD is not usable yet, or nil.
func (e *Env) crdReady(ctx context.Context, name string, httpClient *http.Client) error {
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(crdGVK)
	if err := e.Client.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
		return err
	}
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	established := false
	for _, c := range conds {
		c, _ := c.(map[string]any)
		if c["type"] == "Established" && c["status"] == "True" {
			established = true
		}
	}
	if !established {
		return errors.New("not Established")
	}
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	mapper, err := apiutil.NewDynamicRESTMapper(e.Cluster.Config, httpClient)
	if err != nil {
		return err
	}
	for _, v := range versions {
		v, _ := v.(map[string]any)
		if served, _ := v["served"].(bool); !served {
			continue
		}
		version, _ := v["name"].(string)
		if _, err := mapper.RESTMapping(schema.GroupKind{Group: group, Kind: kind}, version); err != nil {
			return fmt.Errorf("not in discovery: %w", err)
		}
	}
	return nil
}

// readCRDs reads every document of a YAML file, each of which must be a CRD.
func readCRDs(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var crds []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		if len(raw.Raw) == 0 || string(raw.Raw) == "null" {
			continue // a document of comments only
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw.Raw); err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		if u.GroupVersionKind() != crdGVK {
			return nil, fmt.Errorf("read %s: %s %s is not a CustomResourceDefinition", path, u.GroupVersionKind(), u.GetName())
		}
		crds = append(crds, u)
	}
	if len(crds) == 0 {
		return nil, fmt.Errorf("read %s: no CustomResourceDefinition", path)
	}
	return crds, nil
}

// ArgoClient is an admin client that knows the built-in kinds and Argo Rollouts; make it
// after the CRD is installed.
func (e *Env) ArgoClient(t testing.TB) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := argo.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(e.Cluster.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// FluxHelmReleaseCRD is the path of the Flux HelmRelease CRD (helm.toolkit.fluxcd.io),
// generated from github.com/fluxcd/helm-controller/api v1.6.5 (the module configstamp
// uses) with controller-gen: test/testdata/flux/README.md says how.
func FluxHelmReleaseCRD() string {
	return filepath.Join(cluster.RepoRoot(), "test", "testdata", "flux", "helmreleases-crd.yaml")
}
