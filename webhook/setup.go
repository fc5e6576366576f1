package webhook

import (
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Options configure the admission webhook.
type Options struct {
	// ReadTimeout bounds the live ConfigMap reads of one admission.
	ReadTimeout time.Duration
}

// SetupWithManager registers the Deployment stamper on the manager's webhook server.
// Every replica serves admission; nothing here needs leader election.
func SetupWithManager(mgr ctrl.Manager, opts Options) {
	wh := &admission.Webhook{Handler: &Stamper{Reader: mgr.GetAPIReader(), ReadTimeout: opts.ReadTimeout}}
	mgr.GetWebhookServer().Register(Path, wh.WithRecoverPanic(true))
}
