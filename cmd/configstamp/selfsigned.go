package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/certs"
	"github.com/configstamp/configstamp/webhook"
)

// selfSignedOptions configure the self-signed certificate mode (clusters without
// cert-manager).
type selfSignedOptions struct {
	secret       string
	hosts        string
	registration string
	validity     time.Duration
	renewBefore  time.Duration
	caValidity   time.Duration
	caSwitch     time.Duration
}

func (s *selfSignedOptions) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.secret, "self-signed-secret", "", "Self-signed certificate mode: keep a CA and the serving certificate in this Secret (NAMESPACE/NAME), renew them, write them into --webhook-cert-dir and keep the registration's caBundle current. For clusters without cert-manager.")
	fs.StringVar(&s.hosts, "self-signed-hosts", "", "Comma-separated DNS names and IP addresses of the serving certificate (self-signed mode), e.g. configstamp.configstamp-system.svc.")
	fs.StringVar(&s.registration, "self-signed-registration", webhook.ConfigurationName, "MutatingWebhookConfiguration whose caBundle self-signed mode keeps current (empty: none).")
	fs.DurationVar(&s.validity, "self-signed-validity", 90*24*time.Hour, "Lifetime of the self-signed serving certificate.")
	fs.DurationVar(&s.renewBefore, "self-signed-renew-before", 30*24*time.Hour, "Renew the serving certificate this long before it expires.")
	fs.DurationVar(&s.caValidity, "self-signed-ca-validity", 5*365*24*time.Hour, "Lifetime of the self-signed CA.")
	fs.DurationVar(&s.caSwitch, "self-signed-ca-switch-delay", certs.DefaultCASwitchDelay, "After a new CA is published in the registration's caBundle, how long to wait before serving a certificate it signed (API servers pick the bundle up through their watches).")
}

func (s *selfSignedOptions) rotator(cfg *rest.Config, scheme *runtime.Scheme, certDir string) (*certs.Rotator, error) {
	ns, name, ok := strings.Cut(s.secret, "/")
	if !ok || ns == "" || name == "" {
		return nil, fmt.Errorf("--self-signed-secret %q: want NAMESPACE/NAME", s.secret)
	}
	var hosts []string
	for _, h := range strings.Split(s.hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("--self-signed-hosts is required with --self-signed-secret")
	}
	if s.caSwitch <= 0 {
		return nil, fmt.Errorf("--self-signed-ca-switch-delay must be positive")
	}
	if s.renewBefore >= s.validity || s.validity >= s.caValidity {
		return nil, fmt.Errorf("want --self-signed-renew-before < --self-signed-validity < --self-signed-ca-validity")
	}
	if certDir == "" {
		certDir = "/tmp/k8s-webhook-server/serving-certs"
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	return &certs.Rotator{
		Client: c, Watch: cs, CASwitchDelay: s.caSwitch, Secret: types.NamespacedName{Namespace: ns, Name: name}, Registration: s.registration,
		Hosts: hosts, CertDir: certDir, Validity: s.validity, RenewBefore: s.renewBefore, CAValidity: s.caValidity,
	}, nil
}
