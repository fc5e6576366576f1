package precision

import (
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/apitime"
	"github.com/configstamp/configstamp/test/internal/concurrent"
	"github.com/configstamp/configstamp/webhook"
)

// TestCreatedTogetherWhileDown: with the registration in place and configstamp down (an
// outage, or the restart of its only replica), a release applies 50 ConfigMaps and the 50
// Deployments that mount them at once: the API server admits them unstamped, and each
// rolls out once. Then 10 of the ConfigMaps are edited, still while it is down. When
// configstamp starts, exactly those 10 roll, once each; the other 40, whose pods can only
// have read the one content their required ConfigMap has had, are recorded, not rolled.
// (Comparing one-second times alone, a ConfigMap written in the same second as the
// ReplicaSet counted as newer: most of the 40 rolled.)
func TestCreatedTogetherWhileDown(t *testing.T) {
	const n, edited = 50, 10
	cs := env.Start(t, framework.Options{})
	ns := env.NewNamespace(t, true)
	// Covered since before the release (Deployments since the registration's creation;
	// the watcher's coverage record shows it has begun): its Deployments should have been
	// stamped at creation (not installed over, which records whatever runs).
	framework.Eventually(t, 30*time.Second, "coverage recorded", func() error {
		var reg admissionregistrationv1.MutatingWebhookConfiguration
		if err := env.Client.Get(bg, client.ObjectKey{Name: webhook.DevConfigurationName}, &reg); err != nil {
			return err
		}
		if v := reg.Annotations[stamp.CoverageAnnotation]; !strings.Contains(v, `"statefulsets"`) {
			return fmt.Errorf("coverage %q", v)
		}
		return nil
	})
	apitime.NextSecond()
	cs.Kill()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("app-%02d", i)
	}
	each := func(f func(t testing.TB, i int, name string)) {
		fs := make([]func(testing.TB), len(names))
		for i, name := range names {
			fs[i] = func(t testing.TB) { f(t, i, name) }
		}
		concurrent.Run(t, fs...)
	}
	each(func(t testing.TB, _ int, name string) {
		createConfigMap(t, ns, name, map[string]string{"k": "1"})
		createDeployment(t, ns, name, name, volume(nil, false))
	})
	each(func(t testing.TB, _ int, name string) {
		if h := env.RolledOut(t, ns, name).Spec.Template.Annotations[stamp.HashAnnotation]; h != "" {
			t.Errorf("%s stamped while configstamp was down: %s", name, h)
		}
	})
	apitime.NextSecond()
	for _, name := range names[:edited] {
		setData(t, ns, name, "k", "2")
	}

	env.Start(t, framework.Options{})
	each(func(t testing.TB, i int, name string) {
		if i >= edited {
			waitRecord(t, ns, name)
			rollouts(t, ns, name, 1)
			return
		}
		d := rollouts(t, ns, name, 2)
		if got, want := d.Spec.Template.Annotations[stamp.HashAnnotation], docHash(t, ns, name, volume(nil, false)); got != want {
			t.Errorf("%s: hash %q, want %q", name, got, want)
		}
	})
}
