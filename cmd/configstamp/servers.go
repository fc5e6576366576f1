package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/configstamp/configstamp/internal/metricsauth"
)

// webhookTLS sets the webhook server's TLS: TLS 1.2 at least, and HTTP/1.1 only unless
// HTTP/2 is asked for.
func webhookTLS(http2 bool) func(*tls.Config) {
	return func(c *tls.Config) {
		c.MinVersion = tls.VersionTLS12
		if !http2 {
			c.NextProtos = []string{"http/1.1"}
		}
	}
}

// clientCA makes the webhook server require a client certificate signed by a CA in the
// PEM file at path (the API server's, per its admission configuration), in the handshake.
// The file is watched (apiserver's DynamicFileCAContent, as kube-apiserver reads its own
// --client-ca-file): a rotated CA is trusted, and the one it replaced refused, without a
// restart; a file rewritten unreadable or empty keeps the last good CAs. The returned
// runnable keeps the file watched while the manager runs.
func clientCA(path string) (func(*tls.Config), manager.Runnable, error) {
	ca, err := dynamiccertificates.NewDynamicCAContentFromFile("webhook-client-ca", path)
	if err != nil {
		return nil, nil, fmt.Errorf("--webhook-client-ca-file: %w", err)
	}
	set := func(c *tls.Config) {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cfg := c.Clone()
			cfg.GetConfigForClient = nil
			opts, _ := ca.VerifyOptions() // loaded once above: always there
			cfg.ClientCAs = opts.Roots
			return cfg, nil
		}
	}
	return set, caWatch{ca}, nil
}

// caWatch runs a DynamicFileCAContent's file watch on every replica.
type caWatch struct {
	*dynamiccertificates.DynamicFileCAContent
}

func (w caWatch) Start(ctx context.Context) error {
	w.Run(ctx, 1)
	return nil
}

func (caWatch) NeedLeaderElection() bool { return false }

// metricsOptions is the metrics server: plain HTTP, or with secure HTTPS (a certificate
// controller-runtime generates) where every request must carry a token the API server
// authenticates (TokenReview) and authorizes for get on /metrics (SubjectAccessReview):
// see metricsauth.
func metricsOptions(addr string, secure, http2 bool) metricsserver.Options {
	o := metricsserver.Options{BindAddress: addr}
	if secure {
		o.SecureServing = true
		o.FilterProvider = metricsauth.FilterProvider
		o.TLSOpts = []func(*tls.Config){webhookTLS(http2)}
	}
	return o
}

// delayShutdown returns the context the manager runs under: it ends delay after ctx
// does. In between, the returned check fails (the pod leaves its Service's endpoints)
// while the webhook goes on serving the API servers that have not noticed yet.
func delayShutdown(ctx context.Context, delay time.Duration) (context.Context, context.CancelFunc, healthz.Checker) {
	var stopping atomic.Bool
	mgrCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-mgrCtx.Done():
			return
		case <-ctx.Done():
		}
		stopping.Store(true)
		if delay > 0 {
			ctrl.Log.WithName("setup").Info("Shutting down: not ready, serving on for the shutdown delay", "delay", delay.String())
			select {
			case <-mgrCtx.Done():
			case <-time.After(delay):
			}
		}
		cancel()
	}()
	return mgrCtx, cancel, func(*http.Request) error {
		if stopping.Load() {
			return errors.New("shutting down")
		}
		return nil
	}
}
