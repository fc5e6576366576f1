package explain

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// TestOffline decodes a YAML stream and a JSON List and checks the stamp against the
// stamp core's for the same objects.
func TestOffline(t *testing.T) {
	yamlDocs := `apiVersion: v1
kind: ConfigMap
metadata: {name: app}
data: {a: "1", b: "2"}
---
apiVersion: v1
kind: Service
metadata: {name: ignored-kind}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      containers:
      - name: c
        env: [{name: A, valueFrom: {configMapKeyRef: {name: app, key: a}}}]
        envFrom: [{secretRef: {name: creds}}]
`
	jsonList := `{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"}, "stringData": {"t": "x"}},
  {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": "ro", "namespace": "other"},
   "spec": {"template": {"spec": {"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "app"}}]}]}}}}
]}`
	var m Manifests
	kinds := append(workload.Builtin(), workload.Rollout)
	for _, in := range []string{yamlDocs, jsonList} {
		if err := Decode(strings.NewReader(in), "ns", kinds, &m); err != nil {
			t.Fatal(err)
		}
	}
	key := []byte("0123456789abcdef0123456789abcdef")
	got, err := Offline(&m, key, stamp.Options{Secrets: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("stamps: %+v", got)
	}
	// The same objects through the stamp core.
	web := m.Workloads[0].Object
	tmpl := workload.Deployment.Template(web)
	refs := stamp.Consumed(nil, &tmpl.Spec, stamp.Options{Secrets: true})
	content := map[string]*corev1.ConfigMap{
		"configmap/app": {Data: map[string]string{"a": "1", "b": "2"}},
		"secret/creds":  {Data: map[string]string{"t": "x"}},
	}
	want, err := stamp.Compute(context.Background(), refs, func(_ context.Context, kind, name string) (*corev1.ConfigMap, error) {
		return content[kind+"/"+name], nil
	}, stamp.NamespaceKey(key, "ns"))
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Name != "web" || got[0].Namespace != "ns" || got[0].Hash != want.Hash || got[0].Sources != want.SourcesAnnotation() {
		t.Errorf("web: %+v, want %s %s", got[0], want.Hash, want.SourcesAnnotation())
	}
	// The Rollout is in another namespace, where configmap/app is not: hashed as missing.
	if got[1].Kind != "rollout" || strings.Join(got[1].NotInFiles, ",") != "configmap/app" || got[1].Sources != "configmap/app=missing" {
		t.Errorf("ro: %+v", got[1])
	}
	// Without --secrets, Secrets do not count; without the key, nothing is digested.
	noSecrets, err := Offline(&m, key, stamp.Options{})
	if err != nil || strings.Contains(noSecrets[0].Sources, "secret/") {
		t.Errorf("without Secrets: %+v %v", noSecrets, err)
	}
	// Past the cap (web consumes two with Secrets, one without), no stamp.
	capped, err := Offline(&m, key, stamp.Options{Secrets: true, MaxSources: 1})
	if err != nil || !capped[0].TooManySources || capped[0].Hash != "" || capped[1].TooManySources {
		t.Errorf("--max-sources 1: %+v %v", capped, err)
	}
	if capped, err := Offline(&m, key, stamp.Options{MaxSources: 1}); err != nil || capped[0].TooManySources {
		t.Errorf("--max-sources 1 without Secrets: %+v %v", capped, err)
	}
	if _, err := Offline(&m, nil, stamp.Options{Secrets: true}); !errors.Is(err, stamp.ErrNoKey) {
		t.Errorf("without key: %v, want ErrNoKey", err)
	}
}

func TestReadKey(t *testing.T) {
	raw := []byte("0123456789abcdef0123456789abcdef")
	if got := ReadKey([]byte("MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n")); string(got) != string(raw) {
		t.Errorf("base64: %q", got)
	}
	if got := ReadKey(raw); string(got) != string(raw) {
		t.Errorf("raw: %q", got)
	}
}
