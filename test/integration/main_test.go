// Package integration tests configstamp against a real kube-apiserver and etcd: the
// configstamp binary runs as a separate process, exactly as a user starts it locally
// (--dev-webhook-url), and registers its own webhook.
package integration

import (
	"context"
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

var (
	env *framework.Env
	k8s client.Client
)

func TestMain(m *testing.M) {
	// The API server presents a client certificate to every webhook
	// (TestWebhookClientCertificate); the other tests ask for none and ignore it.
	os.Exit(framework.Main(m, cluster.Options{WebhookClientCert: true}, func(_ context.Context, e *framework.Env) (func(bool), error) {
		env, k8s = e, e.Client
		return func(bool) {}, nil
	}))
}
