package security

import (
	"context"
	"net/http"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/bench"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/reviews"
	"github.com/configstamp/configstamp/webhook"
)

var bg = context.Background()

// Namespaces of the suite. Forged reviews must never make configstamp read in
// kube-system (excluded), notOptedIn, victim (named by a review from attacker), crowded
// (1,000 sources) or bulky (5 MiB); the oracle, last, reads victim by a review in scope.
const (
	keyNS      = "configstamp-system"
	excluded   = "kube-system"
	notOptedIn = "not-opted-in"
	attacker   = "attacker"
	victim     = "victim"
	crowded    = "crowded"
	bulky      = "bulky"
	flooded    = "flooded"
	realNS     = "real"
	sentinelNS = "sentinel"
)

// Memory: the chart's memory limit, and the GOMEMLIMIT configstamp runs with (as it
// sets it from that limit, with a fifth left for what is not Go heap).
const (
	memoryLimit = 256 << 20
	goMemLimit  = "204MiB"
)

// TestSecurity starts one configstamp (Secrets on, as the chart's hardened install
// runs) and runs the phases one after the other: each phase's negative assertions
// (no read, no log line) are over windows of the audit log and of configstamp's log
// that only that phase's reviews fall in.
func TestSecurity(t *testing.T) {
	for _, ns := range []string{attacker, victim, crowded, bulky, flooded, realNS, sentinelNS} {
		env.CreateNamespace(t, ns, true)
	}
	env.CreateNamespace(t, notOptedIn, false)
	env.CreateNamespace(t, keyNS, false)
	seed(t)
	// GOMEMLIMIT reaches configstamp through its environment, as the chart passes it.
	t.Setenv("GOMEMLIMIT", goMemLimit)
	s := &suite{cs: env.Start(t, framework.Options{Args: []string{"--secrets", "--secret-hash-key", keyNS + "/hash-key"}})}
	var err error
	if s.hc, err = reviews.Client(bg, k8s, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	s.url = reviews.URL(s.cs.WebhookPort)
	s.timeout = registrationTimeout(t)
	start := auditMark()
	t.Run("ForgedReviews", s.testForgedReviews)
	t.Run("FiftyAtOnce", s.testFiftyAtOnce)
	t.Run("Flood", s.testFlood)
	t.Run("UnknownNamespaceFlood", s.testUnknownNamespaceFlood)
	t.Run("ConnectAndClose", s.testConnectAndClose)
	t.Run("FloodAtCapacity", s.testFloodAtCapacity)
	t.Run("NeverReadOutOfScope", func(t *testing.T) {
		s.noReads(t, start, excluded, notOptedIn, victim, crowded, bulky)
	})
	t.Run("Oracle", s.testOracle)
}

// suite is the configstamp process the phases share and a client of its webhook port.
type suite struct {
	cs      *framework.Configstamp
	hc      *http.Client
	url     string
	timeout time.Duration // the registration's timeoutSeconds
	probes  int           // sentinel reviews posted so far
}

// registrationTimeout is the webhook timeout the API server applies to configstamp.
func registrationTimeout(t *testing.T) time.Duration {
	t.Helper()
	var reg admissionregistrationv1.MutatingWebhookConfiguration
	if err := k8s.Get(bg, client.ObjectKey{Name: webhook.DevConfigurationName}, &reg); err != nil {
		t.Fatal(err)
	}
	return time.Duration(*reg.Webhooks[0].TimeoutSeconds) * time.Second
}

func auditMark() bench.AuditMark { return bench.MarkAudit(env.Cluster.AuditLog) }
