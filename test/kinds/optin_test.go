package kinds

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/configmaps"
	"github.com/configstamp/configstamp/webhook"
)

// optInScenario: in a namespace that is not opted in, the Deployment labelled to opt in
// rolls once per change of the ConfigMap cfg, and never on a label-only change; the
// unlabelled one beside it, consuming the same ConfigMap, is never stamped nor rolled.
func optInScenario(t *testing.T, labelled, plain *appsv1.Deployment) {
	ns := labelled.Namespace
	relabel(t, ns, "cfg")
	env.ExpectReplicaSets(t, ns, labelled.Name, 1, settle)
	env.ExpectReplicaSets(t, ns, plain.Name, 1, 0)
	configmaps.SetData(t, env.Client, ns, "cfg", "k", "2")
	stampedWith(t, env.ExpectReplicaSets(t, ns, labelled.Name, 2, settle), docHash(t, ns, "cfg"))
	env.ExpectReplicaSets(t, ns, plain.Name, 1, 0)
	untouched(t, plain)
	checkAfterRestart(func(t *testing.T) {
		env.ExpectReplicaSets(t, ns, labelled.Name, 2, 0)
		env.ExpectReplicaSets(t, ns, plain.Name, 1, 0)
	})
}

// testOneCallPerRequest: the API server calls configstamp once per CREATE and UPDATE of
// a Deployment opted in both by its namespace and by its own label (the namespace's
// entry only), once for one opted in by its label alone (the by-label entry), and never
// for one opted in neither way, as its audit log records every webhook it calls.
func testOneCallPerRequest(t *testing.T) {
	t.Parallel()
	in, out := env.NewNamespace(t, true), env.NewNamespace(t, false)
	cases := []struct {
		d    *appsv1.Deployment
		want []string
	}{
		{newDeployment(in, "both-ways", "cfg", optedIn), []string{workload.Deployment.EntryName()}},
		{newDeployment(out, "label-only", "cfg", optedIn), []string{workload.Deployment.LabelEntryName()}},
		{newDeployment(out, "neither", "cfg", nil), nil},
	}
	for _, ns := range []string{in, out} {
		createConfigMap(t, ns, "cfg", map[string]string{"k": "1"}, nil)
	}
	for _, c := range cases {
		create(t, c.d)
		// An update of the pod template, as kubectl rollout restart makes (one that
		// leaves the template as it is, as kubectl label makes, calls no entry: the
		// match conditions, test/integration MatchConditions).
		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"template":{"metadata":{"annotations":{"touched":"yes"}}}}}`))
		if err := env.Client.Patch(bg, c.d, patch); err != nil {
			t.Fatalf("patch the template of deployment %s: %v", c.d.Name, err)
		}
	}
	for _, c := range cases {
		for _, verb := range []string{"create", "patch"} {
			var got []string
			framework.Eventually(t, 20*time.Second, "audit event of the "+verb+" of "+c.d.Name, func() (err error) {
				got, err = webhookCalls(c.d.Namespace, c.d.Name, verb)
				return err
			})
			if !slices.Equal(got, c.want) {
				t.Errorf("%s of %s/%s called configstamp's entries %q, want %q", verb, c.d.Namespace, c.d.Name, got, c.want)
			}
		}
	}
}

// webhookCalls returns the entries of configstamp's registration that the API server
// called for the one request of verb by the admin on the Deployment ns/name, from the
// mutation.webhook.admission.k8s.io annotations it adds to the audit event for every
// mutating webhook it calls (whether or not it mutated).
func webhookCalls(ns, name, verb string) ([]string, error) {
	raw, err := os.ReadFile(env.Cluster.AuditLog)
	if err != nil {
		return nil, err
	}
	var found [][]string
	for _, line := range bytes.Split(raw, []byte("\n")) {
		if !bytes.Contains(line, []byte(name)) {
			continue
		}
		var ev struct {
			Verb, Stage string
			User        struct{ Username string }
			ObjectRef   struct{ Resource, Namespace, Name, Subresource string }
			Annotations map[string]string
		}
		if json.Unmarshal(line, &ev) != nil || ev.Stage != "ResponseComplete" || ev.Verb != verb || ev.User.Username != cluster.AdminUser ||
			ev.ObjectRef.Resource != "deployments" || ev.ObjectRef.Subresource != "" || ev.ObjectRef.Namespace != ns || ev.ObjectRef.Name != name {
			continue
		}
		var calls []string
		for k, v := range ev.Annotations {
			if !strings.HasPrefix(k, "mutation.webhook.admission.k8s.io/") {
				continue
			}
			var call struct{ Configuration, Webhook string }
			if err := json.Unmarshal([]byte(v), &call); err != nil {
				return nil, fmt.Errorf("annotation %s=%s: %w", k, v, err)
			}
			if call.Configuration == webhook.DevConfigurationName {
				calls = append(calls, call.Webhook)
			}
		}
		slices.Sort(calls)
		found = append(found, calls)
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%d audit events of the %s of deployments %s/%s, want 1", len(found), verb, ns, name)
	}
	return found[0], nil
}
