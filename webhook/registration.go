package webhook

import (
	"context"
	"fmt"
	"net/http"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/configstamp/configstamp/internal/scope"
)

// Names in the registration. The entry name has three dot-separated parts because the API
// server uses it as the prefix of the audit annotations (deployments.configstamp.io/config-hash).
const (
	ConfigurationName = "configstamp"
	EntryName         = "deployments.configstamp.io"
	DefaultTimeout    = 5
)

// Registration is the MutatingWebhookConfiguration that sends Deployment CREATE and
// UPDATE in the namespaces of sc to configstamp. cfg is either a URL (dev mode) or a
// Service reference, with the CA that signs the serving certificate.
func Registration(cfg admissionregistrationv1.WebhookClientConfig, sc *scope.Scope) *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: ConfigurationName, Labels: map[string]string{"app.kubernetes.io/name": "configstamp"}},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         EntryName,
			ClientConfig: cfg,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"},
					Scope: ptr.To(admissionregistrationv1.NamespacedScope),
				},
			}},
			// The watcher acts in exactly these namespaces (same scope).
			NamespaceSelector: sc.NamespaceSelector(),
			// Fail open: an outage of configstamp never blocks a deploy; the watcher
			// notices the missed stamp and heals it.
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To[int32](DefaultTimeout),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
		}},
	}
}

// Registrar creates or updates the registration once the webhook server is serving. It
// runs on every replica (no leader election): the registration is the same for all.
type Registrar struct {
	Client       client.Client
	Registration *admissionregistrationv1.MutatingWebhookConfiguration
	// Started reports when the webhook server serves (webhook.Server.StartedChecker()).
	Started healthz.Checker
}

var _ manager.LeaderElectionRunnable = &Registrar{}

// NeedLeaderElection is false: every replica may (idempotently) register.
func (r *Registrar) NeedLeaderElection() bool { return false }

// Start waits for the webhook server, then applies the registration.
func (r *Registrar) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("registrar")
	req, _ := http.NewRequest(http.MethodGet, "/", nil)
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		return r.Started(req) == nil, nil
	}); err != nil {
		return fmt.Errorf("wait for webhook server: %w", err)
	}
	err := wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 8, Cap: 10 * time.Second},
		func(ctx context.Context) (bool, error) {
			if err := r.apply(ctx); err != nil {
				log.Error(err, "Failed to apply webhook registration; retrying")
				return false, nil
			}
			return true, nil
		})
	if err != nil {
		return fmt.Errorf("apply registration %s: %w", r.Registration.Name, err)
	}
	log.Info("Registered webhook", "configuration", r.Registration.Name, "entry", EntryName)
	<-ctx.Done()
	return nil
}

func (r *Registrar) apply(ctx context.Context) error {
	want := r.Registration.DeepCopy()
	var cur admissionregistrationv1.MutatingWebhookConfiguration
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), &cur)
	if apierrors.IsNotFound(err) {
		return r.Client.Create(ctx, want)
	}
	if err != nil {
		return err
	}
	cur.Labels = want.Labels
	cur.Webhooks = want.Webhooks
	return r.Client.Update(ctx, &cur)
}
