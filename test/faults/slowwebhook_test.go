package faults

import (
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/watcher"
)

// Slow is how late the webhook answers, past the registration's timeout.
const (
	timeoutSeconds = 1
	slow           = 2 * time.Second
)

// TestSlowWebhook makes the webhook answer later than the registration's timeout (a
// delaying proxy in front of it, the registration's timeoutSeconds lowered to one
// second). With failurePolicy Ignore the API server admits what it sends unstamped:
// new Deployments, and the watcher's nudges after a change. The watcher detects the
// bypass (StampBypassed) and retries; once the webhook is fast again, every Deployment
// is stamped, each rolled exactly once for the change.
func TestSlowWebhook(t *testing.T) {
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	px := framework.NewProxy(t, fmt.Sprintf("127.0.0.1:%d", port))
	var c *cs
	var original int32
	fleets := twoWays(t, 5, func() {
		c = start(t, framework.Options{WebhookURL: "https://" + px.Addr, WebhookPort: port})
		original = setTimeout(t, registrationName(t), timeoutSeconds)
	})
	px.SetDelay(slow)
	created := newFleet(t, "created while slow", 5)
	for _, name := range created.names {
		if got := env.Deployment(t, created.ns, name).Spec.Template.Annotations[stamp.HashAnnotation]; got != "" {
			t.Fatalf("%s admitted with stamp %q: the webhook answered in time", name, got)
		}
	}
	fleets = append(fleets, created)
	rolledOutUnstamped(t, created)
	editAll(t, fleets, "2")
	framework.Eventually(t, time.Minute, "every fleet's nudges bypassed", func() error {
		for _, f := range fleets {
			if err := bypassed(f); err != nil {
				return err
			}
		}
		return nil
	})
	px.SetDelay(0)
	setTimeout(t, registrationName(t), original)
	exactlyOnce(t, fleets, 2, time.Now(), "the webhook was fast again", c)
}

// setTimeout sets timeoutSeconds of every entry of the registration (dev mode applies
// it once, at start) and returns what the first entry had. The leader's coverage
// runnable writes the registration too: a conflict is retried on a fresh read.
func setTimeout(t *testing.T, name string, seconds int32) int32 {
	t.Helper()
	var had int32
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var reg admissionregistrationv1.MutatingWebhookConfiguration
		if err := env.Client.Get(bg, client.ObjectKey{Name: name}, &reg); err != nil {
			return err
		}
		if len(reg.Webhooks) == 0 || reg.Webhooks[0].TimeoutSeconds == nil {
			return fmt.Errorf("registration %s: no timeoutSeconds", name)
		}
		had = *reg.Webhooks[0].TimeoutSeconds
		for i := range reg.Webhooks {
			reg.Webhooks[i].TimeoutSeconds = &seconds
		}
		return env.Client.Update(bg, &reg)
	})
	if err != nil {
		t.Fatalf("set timeoutSeconds of %s to %d: %v", name, seconds, err)
	}
	return had
}

// rolledOutUnstamped waits for the first rollout of a fleet admitted unstamped.
func rolledOutUnstamped(t *testing.T, f *fleet) {
	t.Helper()
	framework.Eventually(t, 2*time.Minute, "first rollout of "+f.ns, func() error {
		deps, err := f.deployments()
		if err != nil {
			return err
		}
		for _, d := range deps {
			if d.Status.ObservedGeneration < d.Generation || d.Status.AvailableReplicas != *d.Spec.Replicas {
				return fmt.Errorf("%s not rolled out", d.Name)
			}
		}
		return nil
	})
}

// bypassed finds a StampBypassed Event in the fleet's namespace.
func bypassed(f *fleet) error {
	evs, err := f.bypassEvents()
	if err != nil || len(evs) > 0 {
		return err
	}
	return fmt.Errorf("no %s event in %s (%s)", watcher.ReasonStampBypassed, f.ns, f.mode)
}

// bypassEvents lists the StampBypassed Events in the fleet's namespace, each as
// "kind/name: message".
func (f *fleet) bypassEvents() ([]string, error) {
	var evs corev1.EventList
	if err := env.Client.List(bg, &evs, client.InNamespace(f.ns)); err != nil {
		return nil, err
	}
	var out []string
	for _, e := range evs.Items {
		if e.Reason == watcher.ReasonStampBypassed {
			out = append(out, fmt.Sprintf("%s/%s: %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message))
		}
	}
	return out, nil
}
