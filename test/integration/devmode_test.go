package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/webhook"
)

// TestDevModeLeavesInstalledRegistration: dev mode next to an installed chart's
// registration registers under its own name, never touches the installed one, and
// deletes its own on a clean exit; a registration of its name that it did not make
// stops it with a clear error instead of being taken over.
func TestDevModeLeavesInstalledRegistration(t *testing.T) {
	deleteRegistration(t)
	sc, err := scope.New(stamp.InjectLabel, scope.DefaultExcluded)
	if err != nil {
		t.Fatal(err)
	}
	installed := webhook.Registration(admissionregistrationv1.WebhookClientConfig{URL: new("https://127.0.0.1:1")}, sc, workload.Builtin())
	installed.Labels["app.kubernetes.io/managed-by"] = "Helm"
	create(t, installed)
	t.Cleanup(func() { deleteRegistration(t) })
	before := installed.ResourceVersion

	// Two dev-mode processes: the second registers itself over the first; the first's
	// clean exit leaves the registration to it.
	first := env.Start(t, framework.Options{RemoveRegistration: true})
	p := env.Start(t, framework.Options{RemoveRegistration: true})
	framework.Eventually(t, 20*time.Second, "the second process registered", func() error {
		var reg admissionregistrationv1.MutatingWebhookConfiguration
		if err := k8s.Get(bg, client.ObjectKey{Name: webhook.DevConfigurationName}, &reg); err != nil {
			return err
		}
		if got := *reg.Webhooks[0].ClientConfig.URL; !strings.HasPrefix(got, p.URL) {
			return fmt.Errorf("calls %s", got)
		}
		return nil
	})
	first.Stop()
	var dev admissionregistrationv1.MutatingWebhookConfiguration
	if err := k8s.Get(bg, client.ObjectKey{Name: webhook.DevConfigurationName}, &dev); err != nil {
		t.Fatalf("dev registration: %v", err)
	}
	if got := *dev.Webhooks[0].ClientConfig.URL; !strings.HasPrefix(got, p.URL) {
		t.Errorf("dev registration calls %s after the first process left, want the second's %s", got, p.URL)
	}
	p.Stop()
	if code := p.ExitCode(); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	if err := k8s.Get(bg, client.ObjectKey{Name: webhook.DevConfigurationName}, &dev); !apierrors.IsNotFound(err) {
		t.Errorf("dev registration after a clean exit: %v, want NotFound", err)
	}
	var now admissionregistrationv1.MutatingWebhookConfiguration
	if err := k8s.Get(bg, client.ObjectKeyFromObject(installed), &now); err != nil {
		t.Fatal(err)
	}
	if now.ResourceVersion != before {
		t.Errorf("the installed registration was written (resourceVersion %s -> %s)", before, now.ResourceVersion)
	}

	// A registration named like dev mode's but not made by it (no managed-by label).
	foreign := installed.DeepCopy()
	foreign.ObjectMeta = metav1.ObjectMeta{Name: webhook.DevConfigurationName}
	create(t, foreign)
	ctx, cancel := context.WithTimeout(bg, 60*time.Second)
	defer cancel()
	q, err := env.Run(ctx, framework.Options{RemoveRegistration: true})
	if err == nil {
		q.Stop()
		t.Fatal("dev mode started over a registration it did not make")
	}
	if !strings.Contains(err.Error(), "not labelled app.kubernetes.io/managed-by="+webhook.DevManagedBy) {
		t.Errorf("error does not explain the refusal:\n%v", err)
	}
	if err := k8s.Get(bg, client.ObjectKeyFromObject(foreign), &now); err != nil || len(now.Labels) != 0 {
		t.Errorf("the foreign registration was changed or removed: %v, labels %v", err, now.Labels)
	}
}
