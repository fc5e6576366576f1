package kinds

import (
	"context"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/internal/apitime"
	"github.com/configstamp/configstamp/test/internal/configmaps"
)

// testExtraSources: a Deployment whose pods consume nothing, naming a ConfigMap in
// configstamp.io/extra-sources, is stamped with all of it (binaryData included) at
// creation, rolls once when it changes and never on a label-only change.
func testExtraSources(t *testing.T) {
	t.Parallel()
	ns := env.NewNamespace(t, true)
	createConfigMap(t, ns, "sidecar-cfg", map[string]string{"a": "1"}, map[string][]byte{"blob": {0, 1}})
	apitime.NextSecond()
	d := newDeployment(ns, "sidecar", "", nil)
	d.Annotations = map[string]string{stamp.ExtraSourcesAnnotation: "configmap/sidecar-cfg"}
	create(t, d)
	stampedWith(t, d, docHash(t, ns, "sidecar-cfg"))

	relabel(t, ns, "sidecar-cfg")
	env.ExpectReplicaSets(t, ns, "sidecar", 1, settle)
	configmaps.Patch(t, env.Client, ns, "sidecar-cfg", `{"binaryData":{"blob":"AAI="}}`)
	stampedWith(t, env.ExpectReplicaSets(t, ns, "sidecar", 2, settle), docHash(t, ns, "sidecar-cfg"))
	checkAfterRestart(func(t *testing.T) { env.ExpectReplicaSets(t, ns, "sidecar", 2, 0) })
}

// warnings collects the warnings the API server sends a client.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// testExtraSourcesMalformed: an extra-sources annotation with malformed entries is
// admitted, with a warning naming them, and its valid entry counts: in the stamp at
// creation, and as a source the watcher rolls the Deployment for.
func testExtraSourcesMalformed(t *testing.T) {
	t.Parallel()
	ns := env.NewNamespace(t, true)
	createConfigMap(t, ns, "ok", map[string]string{"k": "1"}, nil)
	apitime.NextSecond()

	w := &warnings{}
	cfg := rest.CopyConfig(env.Cluster.Config)
	cfg.WarningHandlerWithContext = w
	c, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	d := newDeployment(ns, "malformed", "", nil)
	d.Annotations = map[string]string{stamp.ExtraSourcesAnnotation: "configmap/ok, bogus, cm/x"}
	if err := c.Create(bg, d); err != nil {
		t.Fatalf("a malformed extra-sources annotation was rejected: %v", err)
	}
	var warned []string
	for _, text := range w.list {
		if strings.Contains(text, stamp.ExtraSourcesAnnotation) {
			warned = append(warned, text)
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], `"bogus"`) || !strings.Contains(warned[0], `"cm/x"`) || strings.Contains(warned[0], "configmap/ok") {
		t.Fatalf("warnings %q, want one naming the entries \"bogus\" and \"cm/x\", and not configmap/ok", w.list)
	}
	t.Logf("warning: %s", warned[0])
	stampedWith(t, d, docHash(t, ns, "ok"))

	env.ExpectReplicaSets(t, ns, "malformed", 1, 0)
	configmaps.SetData(t, env.Client, ns, "ok", "k", "2")
	stampedWith(t, env.ExpectReplicaSets(t, ns, "malformed", 2, settle), docHash(t, ns, "ok"))
	checkAfterRestart(func(t *testing.T) { env.ExpectReplicaSets(t, ns, "malformed", 2, 0) })
}
