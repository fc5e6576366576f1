package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/workload"
)

// Names in the registration.
const (
	ConfigurationName = "configstamp"
	// DevConfigurationName is dev mode's registration (--dev-webhook-url): never the
	// chart's, so running from a laptop next to an installed chart changes nothing of it.
	DevConfigurationName = "configstamp-dev"
	// DevManagedBy is the app.kubernetes.io/managed-by label of dev mode's registration:
	// dev mode updates or deletes only a registration that carries it.
	DevManagedBy = "configstamp-dev-mode"
	// EntryName is the Deployments' entry (see workload.Kind.EntryName).
	EntryName      = "deployments.configstamp.io"
	DefaultTimeout = 5
)

// Registration is the MutatingWebhookConfiguration that sends CREATE and UPDATE of every
// kind to configstamp: two entries per kind, one for the namespaces of sc, one for
// workloads opted in by their own label in the other namespaces sc does not exclude (so
// a workload that matches both ways is sent once). A namespaced install (sc.Namespaced)
// has the first entry only, for the watched namespaces. cfg is either a URL without a path
// (dev mode) or a Service reference, with the CA that signs the serving certificate; each
// entry gets its kind's path.
func Registration(cfg admissionregistrationv1.WebhookClientConfig, sc *scope.Scope, kinds []*workload.Kind) *admissionregistrationv1.MutatingWebhookConfiguration {
	reg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: ConfigurationName, Labels: map[string]string{"app.kubernetes.io/name": "configstamp"}},
	}
	for _, k := range kinds {
		byNamespace := entry(k, sc.Label, clientConfigFor(cfg, k.Path()))
		byNamespace.Name = k.EntryName()
		// The watcher acts in exactly these namespaces (same scope).
		byNamespace.NamespaceSelector = sc.NamespaceSelector()
		reg.Webhooks = append(reg.Webhooks, byNamespace)
		if !sc.ByLabel() {
			continue
		}
		byLabel := entry(k, sc.Label, clientConfigFor(cfg, k.Path()))
		byLabel.Name = k.LabelEntryName()
		byLabel.NamespaceSelector = sc.LabelNamespaceSelector()
		byLabel.ObjectSelector = sc.ObjectSelector()
		reg.Webhooks = append(reg.Webhooks, byLabel)
	}
	return reg
}

func entry(k *workload.Kind, label string, cfg admissionregistrationv1.WebhookClientConfig) admissionregistrationv1.MutatingWebhook {
	ops := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
	if k.CreateOnly() {
		// Its template cannot change: an UPDATE has nothing to stamp.
		ops = ops[:1]
	}
	return admissionregistrationv1.MutatingWebhook{
		ClientConfig: cfg,
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: ops,
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{k.Group}, APIVersions: []string{k.Version}, Resources: []string{k.Resource},
				Scope: ptr.To(admissionregistrationv1.NamespacedScope),
			},
		}},
		// Fail open: an outage of configstamp never blocks a deploy; the watcher
		// notices the missed stamp and heals it.
		FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		TimeoutSeconds:          ptr.To[int32](DefaultTimeout),
		AdmissionReviewVersions: []string{"v1"},
		ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
		MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
		MatchConditions:         MatchConditions(k, label),
	}
}

// clientConfigFor is cfg calling path.
func clientConfigFor(cfg admissionregistrationv1.WebhookClientConfig, path string) admissionregistrationv1.WebhookClientConfig {
	out := *cfg.DeepCopy()
	switch {
	case out.Service != nil:
		out.Service.Path = ptr.To(path)
	case out.URL != nil:
		u := strings.TrimSuffix(*out.URL, "/") + path
		out.URL = &u
	}
	return out
}

// Registrar is dev mode's registration: it creates or updates it once the webhook
// server is serving, and deletes it on a clean exit unless Keep is set. It never touches
// a registration of the same name that dev mode did not make (the chart's). It runs on
// every replica (no leader election): the registration is the same for all.
type Registrar struct {
	Client       client.Client
	Registration *admissionregistrationv1.MutatingWebhookConfiguration
	// Started reports when the webhook server serves (webhook.Server.StartedChecker()).
	Started healthz.Checker
	// Keep leaves the registration in place on exit (tests that model an installed
	// webhook through restarts).
	Keep bool
	// Ready, when set, is closed once the registration is applied and Settle has passed
	// (API servers pick a registration up through their watches): from then on, writes
	// of workloads reach this webhook.
	Ready  chan struct{}
	Settle time.Duration

	uid types.UID
}

var _ manager.LeaderElectionRunnable = &Registrar{}

// NeedLeaderElection is false: every replica may (idempotently) register.
func (r *Registrar) NeedLeaderElection() bool { return false }

// Start waits for the webhook server, then applies the registration; when ctx ends, it
// deletes it (unless Keep).
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
			err := r.apply(ctx)
			if errors.Is(err, errNotOurs) {
				return false, err
			}
			if err != nil {
				log.Error(err, "Failed to apply webhook registration; retrying")
				return false, nil
			}
			return true, nil
		})
	if err != nil {
		return fmt.Errorf("apply registration %s: %w", r.Registration.Name, err)
	}
	log.Info("Registered webhook", "configuration", r.Registration.Name, "entries", len(r.Registration.Webhooks))
	if r.Ready != nil {
		select {
		case <-time.After(r.Settle):
			close(r.Ready)
		case <-ctx.Done():
		}
	}
	<-ctx.Done()
	if r.Keep {
		return nil
	}
	// The manager's context is over; a short one of our own for the delete.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	deleted, err := r.remove(dctx)
	if err != nil {
		return fmt.Errorf("delete registration %s: %w", r.Registration.Name, err)
	}
	if deleted {
		log.Info("Deleted webhook registration", "configuration", r.Registration.Name)
	} else {
		log.Info("Left the webhook registration: another process registered itself in it since", "configuration", r.Registration.Name)
	}
	return nil
}

// remove deletes the registration if it still calls this process: another dev-mode
// process of the same name that registered itself since (it overwrote the URL) still
// needs it. The delete is conditional on what was read, so a re-registration in between
// is not lost.
func (r *Registrar) remove(ctx context.Context) (bool, error) {
	var cur admissionregistrationv1.MutatingWebhookConfiguration
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(r.Registration), &cur); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if cur.UID != r.uid || len(cur.Webhooks) == 0 || len(r.Registration.Webhooks) == 0 ||
		!equality.Semantic.DeepEqual(cur.Webhooks[0].ClientConfig.URL, r.Registration.Webhooks[0].ClientConfig.URL) {
		return false, nil
	}
	err := r.Client.Delete(ctx, &cur, client.Preconditions{UID: &cur.UID, ResourceVersion: &cur.ResourceVersion})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return false, nil
	}
	return err == nil, err
}

var errNotOurs = errors.New("not made by dev mode")

func (r *Registrar) apply(ctx context.Context) error {
	want := r.Registration.DeepCopy()
	if want.Labels == nil {
		want.Labels = map[string]string{}
	}
	want.Labels["app.kubernetes.io/managed-by"] = DevManagedBy
	var cur admissionregistrationv1.MutatingWebhookConfiguration
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), &cur)
	if apierrors.IsNotFound(err) {
		if err := r.Client.Create(ctx, want); err != nil {
			return err
		}
		r.uid = want.UID
		return nil
	}
	if err != nil {
		return err
	}
	if cur.Labels["app.kubernetes.io/managed-by"] != DevManagedBy {
		return fmt.Errorf("%w: the MutatingWebhookConfiguration %s exists and is not labelled app.kubernetes.io/managed-by=%s (an installed chart's?); choose another --dev-registration-name",
			errNotOurs, want.Name, DevManagedBy)
	}
	cur.Labels = want.Labels
	cur.Webhooks = want.Webhooks
	if err := r.Client.Update(ctx, &cur); err != nil {
		return err
	}
	r.uid = cur.UID
	return nil
}
