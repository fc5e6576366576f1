package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/configstamp/configstamp/certs"
)

// defaultCertDir is controller-runtime's default serving-certificate directory.
const defaultCertDir = "/tmp/k8s-webhook-server/serving-certs"

// certOptions configure how configstamp gets its serving certificate in a cluster:
// self-signed (it issues and renews its own, for clusters without cert-manager), or a
// TLS Secret another tool keeps (cert-manager). In both, configstamp keeps the
// registration's caBundle, publishing a new CA before serving what it signed. Neither:
// the certificate files in --webhook-cert-dir are used as they are (and the caBundle
// is someone else's job).
type certOptions struct {
	selfSignedSecret string
	hosts            string
	validity         time.Duration
	renewBefore      time.Duration
	caValidity       time.Duration
	tlsSecret        string
	caSwitch         time.Duration
}

func (s *certOptions) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.selfSignedSecret, "self-signed-secret", "", "Self-signed certificate mode: keep a CA and the serving certificate in this Secret (NAMESPACE/NAME), renew them, write them into --webhook-cert-dir and keep the caBundle of --registration-name current. For clusters without cert-manager.")
	fs.StringVar(&s.hosts, "self-signed-hosts", "", "Comma-separated DNS names and IP addresses of the serving certificate (self-signed mode, where it is required), e.g. configstamp.configstamp-system.svc.")
	fs.DurationVar(&s.validity, "self-signed-validity", 90*24*time.Hour, "Lifetime of the self-signed serving certificate.")
	fs.DurationVar(&s.renewBefore, "self-signed-renew-before", 30*24*time.Hour, "Renew the serving certificate this long before it expires.")
	fs.DurationVar(&s.caValidity, "self-signed-ca-validity", 5*365*24*time.Hour, "Lifetime of the self-signed CA.")
	fs.StringVar(&s.tlsSecret, "tls-secret", "", "Serve the certificate another tool (cert-manager, with a CA issuer) keeps in this kubernetes.io/tls Secret (NAMESPACE/NAME): written into --webhook-cert-dir, its ca.crt kept in the caBundle of --registration-name, a certificate from a new CA served only after the CA is published.")
	fs.DurationVar(&s.caSwitch, "ca-switch-delay", certs.DefaultCASwitchDelay, "Self-signed and --tls-secret modes: after a new CA is published in the registration's caBundle, how long to wait before serving a certificate it signed (API servers pick the bundle up through their watches).")
}

func (s *certOptions) validate() error {
	if s.selfSignedSecret != "" && s.tlsSecret != "" {
		return errors.New("--self-signed-secret and --tls-secret exclude each other")
	}
	if s.caSwitch <= 0 {
		return errors.New("--ca-switch-delay must be positive")
	}
	return nil
}

func (s *certOptions) enabled() bool { return s.selfSignedSecret != "" || s.tlsSecret != "" }

// ensurer is either certificate mode: Ensure once before the webhook server starts,
// then run.
type ensurer interface {
	manager.Runnable
	Ensure(ctx context.Context) (time.Time, error)
}

// keeper returns the runnable that keeps the serving certificate and the caBundle of
// registration; nil when neither mode is on.
func (s *certOptions) keeper(cfg *rest.Config, c client.Client, certDir, registration string) (ensurer, error) {
	if !s.enabled() {
		return nil, nil
	}
	if certDir == "" {
		certDir = defaultCertDir
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	publish := func(p *certs.Publisher) {
		p.Client, p.Watch, p.Registration, p.CASwitchDelay = c, cs, registration, s.caSwitch
	}
	if s.tlsSecret != "" {
		ref, err := parseRef("--tls-secret", s.tlsSecret)
		if err != nil {
			return nil, err
		}
		f := &certs.Follower{Secret: ref, CertDir: certDir}
		publish(&f.Publisher)
		return f, nil
	}
	ref, err := parseRef("--self-signed-secret", s.selfSignedSecret)
	if err != nil {
		return nil, err
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
	if s.renewBefore >= s.validity || 2*s.validity > s.caValidity {
		// A CA is replaced a serving certificate's lifetime before its end: at least
		// twice that lifetime keeps the bundle to two CAs.
		return nil, fmt.Errorf("want --self-signed-renew-before < --self-signed-validity, and --self-signed-ca-validity at least twice --self-signed-validity")
	}
	r := &certs.Rotator{Secret: ref, Hosts: hosts, CertDir: certDir, Validity: s.validity, RenewBefore: s.renewBefore, CAValidity: s.caValidity}
	publish(&r.Publisher)
	return r, nil
}

// secretAccess is what the certificate mode needs of its Secret: read and follow it
// (--tls-secret), or also write it (self-signed; created if missing).
func (s *certOptions) secretAccess() []access {
	verbs, ref := []string{"get", "list", "watch"}, s.tlsSecret
	if s.selfSignedSecret != "" {
		verbs, ref = []string{"get", "update"}, s.selfSignedSecret
	}
	r, err := parseRef("", ref)
	if err != nil {
		return nil // reported when the mode starts
	}
	var out []access
	for _, v := range verbs {
		out = append(out, access{"", "secrets", v, r.Name, r.Namespace})
	}
	return out
}

func parseRef(flag, v string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(v, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("%s %q: want NAMESPACE/NAME", flag, v)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// ensureFirst runs k's first pass before the webhook server starts (it needs the
// files), retrying every error (cert-manager has not filled its Secret yet, the API
// server is briefly unreachable, a new CA waits for API servers to trust it) with a log
// line each time, until ctx ends. Meanwhile probeAddr answers /healthz (alive) and
// /readyz (not ready), so that a long wait is not taken for a hung process.
func ensureFirst(ctx context.Context, k ensurer, probeAddr string) error {
	log := ctrl.Log.WithName("certs")
	if probeAddr != "" && probeAddr != "0" {
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "waiting for the serving certificate", http.StatusServiceUnavailable)
		})
		srv := &http.Server{Addr: probeAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		ln, err := net.Listen("tcp", probeAddr)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", probeAddr, err)
		}
		go func() { _ = srv.Serve(ln) }()
		// Closed before the manager's own probe server binds the address (the listener
		// too: Close does not reach one Serve has not taken up yet).
		defer func() { _ = srv.Close(); _ = ln.Close() }()
	}
	for {
		next, err := k.Ensure(ctx)
		if err == nil {
			return nil
		}
		if errors.Is(err, certs.ErrWaiting) {
			log.Info("Waiting for API servers to trust the serving certificate's CA", "reason", err.Error())
		} else {
			log.Error(err, "Waiting for the serving certificate")
		}
		wait := min(max(time.Until(next), 2*time.Second), time.Minute)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}
