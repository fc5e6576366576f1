package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/webhook"
)

// testMatchConditions writes one Deployment in steps, each with its own user agent, and
// reads from the API server's audit log whether the API server called configstamp for
// it: CREATE, a pod template change, a change of any configstamp.io/ annotation or of
// the opt-in label do; labels, replicas, paused and other annotations do not.
func testMatchConditions(t *testing.T, _ *framework.Configstamp) {
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "mc", map[string]string{"k": "1"}))
	step := 0
	write := func(mutate func(*appsv1.Deployment)) string {
		step++
		ua := fmt.Sprintf("configstamp-test-matchconditions/%s/%d", ns, step)
		c := clientWithUserAgent(t, ua)
		if step == 1 {
			d := deployment("mc", podWithVolumes("mc"))
			d.Namespace = ns
			if err := c.Create(context.Background(), d); err != nil {
				t.Fatal(err)
			}
			return ua
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			d := getDeployment(t, ns, "mc")
			mutate(d)
			return c.Update(context.Background(), d)
		})
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		return ua
	}
	setAnn := func(k, v string) func(*appsv1.Deployment) {
		return func(d *appsv1.Deployment) {
			if d.Annotations == nil {
				d.Annotations = map[string]string{}
			}
			if v == "" {
				delete(d.Annotations, k)
			} else {
				d.Annotations[k] = v
			}
		}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*appsv1.Deployment)
		called bool
	}{
		{"create", nil, true},
		{"a label", func(d *appsv1.Deployment) { d.Labels = map[string]string{"team": "a"} }, false},
		{"replicas", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](3) }, false},
		{"paused", func(d *appsv1.Deployment) { d.Spec.Paused = true }, false},
		{"another annotation", setAnn("example.com/owner", "b"), false},
		{"the pod template", func(d *appsv1.Deployment) {
			d.Spec.Template.Annotations = map[string]string{"example.com/rev": "2"}
		}, true},
		{"a configstamp.io/ annotation added", setAnn(stamp.SkipAnnotation, "false"), true},
		{"a configstamp.io/ annotation changed", setAnn(stamp.SkipAnnotation, "no"), true},
		{"a configstamp.io/ annotation removed", setAnn(stamp.SkipAnnotation, ""), true},
		{"the opt-in label", func(d *appsv1.Deployment) { d.Labels[stamp.InjectLabel] = stamp.InjectValue }, true},
	} {
		ua := write(tc.mutate)
		var called bool
		framework.Eventually(t, 20*time.Second, "audit event of "+tc.name, func() error {
			var err error
			called, err = calledFor(ua, ns, "mc")
			return err
		})
		if called != tc.called {
			t.Errorf("%s: configstamp called %v, want %v", tc.name, called, tc.called)
		}
	}
}

func clientWithUserAgent(t *testing.T, ua string) client.Client {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", env.Cluster.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.UserAgent = ua
	c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// calledFor finds the successful write of deployments ns/name by user agent ua in the
// audit log and reports whether configstamp's Deployments entry was called for it (the
// API server records each mutating webhook it calls at level Metadata).
func calledFor(ua, ns, name string) (bool, error) {
	raw, err := os.ReadFile(env.Cluster.AuditLog)
	if err != nil {
		return false, err
	}
	for _, line := range bytes.Split(raw, []byte("\n")) {
		if !bytes.Contains(line, []byte(ua)) {
			continue
		}
		var ev struct {
			Stage          string
			UserAgent      string
			ObjectRef      struct{ Namespace, Name, Resource string }
			ResponseStatus struct{ Code int }
			Annotations    map[string]string
		}
		if json.Unmarshal(line, &ev) != nil || ev.UserAgent != ua || ev.Stage != "ResponseComplete" ||
			ev.ObjectRef.Resource != "deployments" || ev.ObjectRef.Namespace != ns || ev.ObjectRef.Name != name ||
			ev.ResponseStatus.Code/100 != 2 {
			continue
		}
		for k, v := range ev.Annotations {
			if strings.HasPrefix(k, "mutation.webhook.admission.k8s.io/") && strings.Contains(v, `"webhook":"`+webhook.EntryName+`"`) {
				return true, nil
			}
		}
		return false, nil
	}
	return false, fmt.Errorf("no audit event of a write by %s yet", ua)
}
