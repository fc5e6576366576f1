// Package namespaced is the check of a namespaced install (--watch-namespaces) that the
// integration and the chart tests share: stamps and re-stamps in a watched namespace,
// nothing in one that is not (even opted in by label), and, from the API server's audit
// log, no request of configstamp's outside its namespaces.
package namespaced

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

// AuditMark is the audit log's size now: Check reads the requests made after it.
func AuditMark(t testing.TB, env *framework.Env) int64 {
	t.Helper()
	fi, err := os.Stat(env.Cluster.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// Install is a namespaced install under test: configstamp running as User, acting in
// Watched, its own namespace Own with the coverage ConfigMap Coverage.
type Install struct {
	Env         *framework.Env
	Configstamp *framework.Configstamp
	User        string
	Own         string
	Coverage    string
	Watched     []string
	// Mark is the audit log's offset before configstamp started (AuditMark).
	Mark int64
	// Webhook, when set, is the webhook role's process, running as WebhookUser (the
	// chart's split roles; Configstamp is then the watcher's): stopped and audited alike.
	Webhook     *framework.Configstamp
	WebhookUser string
}

// Check creates a ConfigMap and a Deployment consuming it, labelled opted in, in
// watched (one of i.Watched) and in other (a namespace not watched, opted in by
// label), then changes both ConfigMaps: the one in watched is stamped on create and
// re-stamped through the watcher's nudge, the coverage is kept on i.Coverage, the one
// in other is never touched; then it stops configstamp and checks the audit log: no
// request of i.User outside i.Watched and i.Own (its self-reviews aside), none
// forbidden.
func (i Install) Check(t *testing.T, watched, other string) {
	t.Helper()
	ctx := context.Background()
	c := i.Env.Client
	// Serving: a dry-run create in watched comes back stamped (the probe Start waits
	// for may have been answered by another process).
	framework.Eventually(t, 30*time.Second, "serving in "+watched, func() error {
		d := framework.ProbeDeployment()
		d.Namespace = watched
		if err := c.Create(ctx, d, client.DryRunAll); err != nil {
			return err
		}
		if d.Spec.Template.Annotations[stamp.HashAnnotation] == "" {
			return fmt.Errorf("dry-run create not stamped")
		}
		return nil
	})
	apps := map[string]*appsv1.Deployment{}
	for _, ns := range []string{other, watched} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cfg"}, Data: map[string]string{"k": "1"}}
		if err := c.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{"app": "app", stamp.InjectLabel: stamp.InjectValue}
		dep := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Labels: labels},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1",
						EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}}}}},
		}
		if err := c.Create(ctx, dep); err != nil {
			t.Fatal(err)
		}
		apps[ns] = dep
		if err := c.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte(`{"data":{"k":"2"}}`))); err != nil {
			t.Fatal(err)
		}
	}
	if apps[other].Spec.Template.Annotations[stamp.HashAnnotation] != "" {
		t.Error("stamped in a namespace not watched")
	}
	first := apps[watched].Spec.Template.Annotations[stamp.HashAnnotation]
	if first == "" {
		t.Fatal("not stamped on create in a watched namespace")
	}
	framework.Eventually(t, 30*time.Second, "re-stamped through the watcher's nudge", func() error {
		var d appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKeyFromObject(apps[watched]), &d); err != nil {
			return err
		}
		if h := d.Spec.Template.Annotations[stamp.HashAnnotation]; h == first {
			return fmt.Errorf("hash still %s", h)
		}
		return nil
	})
	framework.Eventually(t, 30*time.Second, "coverage kept on its ConfigMap", func() error {
		var cm corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: i.Own, Name: i.Coverage}, &cm); err != nil {
			return err
		}
		if v := cm.Annotations[stamp.CoverageAnnotation]; !strings.Contains(v, "statefulsets") {
			return fmt.Errorf("coverage annotation %q", v)
		}
		return nil
	})
	var d appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKeyFromObject(apps[other]), &d); err != nil || d.Spec.Template.Annotations[stamp.HashAnnotation] != "" || d.Generation != 1 {
		t.Errorf("the Deployment in the namespace not watched was touched: generation %d, %v (%v)", d.Generation, d.Spec.Template.Annotations, err)
	}
	i.Configstamp.Stop()
	if i.Webhook != nil {
		i.Webhook.Stop()
	}
	i.checkAudit(t, i.User)
	if i.WebhookUser != "" {
		i.checkAudit(t, i.WebhookUser)
	}
}

type event struct {
	Verb, Stage    string
	User           struct{ Username string }
	ObjectRef      *struct{ Resource, Namespace, Name string }
	ResponseStatus struct{ Code int }
}

func (i Install) checkAudit(t *testing.T, user string) {
	t.Helper()
	raw, err := os.ReadFile(i.Env.Cluster.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	allowed := append([]string{i.Own}, i.Watched...)
	n := 0
	for _, line := range bytes.Split(raw[i.Mark:], []byte("\n")) {
		var ev event
		if json.Unmarshal(line, &ev) != nil || ev.Stage != "ResponseComplete" || ev.User.Username != user {
			continue
		}
		n++
		switch {
		case ev.ResponseStatus.Code == 403:
			t.Errorf("forbidden: %s %+v", ev.Verb, ev.ObjectRef)
		case ev.ObjectRef == nil: // discovery
		case ev.ObjectRef.Namespace == "" && slices.Contains([]string{"selfsubjectaccessreviews", "selfsubjectreviews"}, ev.ObjectRef.Resource):
		case !slices.Contains(allowed, ev.ObjectRef.Namespace):
			t.Errorf("configstamp's %s of %s %s/%s: outside its namespaces %v", ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Namespace, ev.ObjectRef.Name, allowed)
		}
	}
	if n == 0 {
		t.Fatalf("no request of %s in the audit log", user)
	}
	t.Logf("%d requests of %s, none outside %v", n, user, allowed)
}
