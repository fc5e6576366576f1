package integration

import (
	"testing"

	"github.com/configstamp/configstamp/test/framework"
)

// TestWithRunningConfigstamp runs the scenarios that share one configstamp process, in
// parallel, each in its own namespace.
func TestWithRunningConfigstamp(t *testing.T) {
	metricsAddr := freeAddr(t)
	cs := env.Start(t, framework.Options{Args: []string{"--metrics-bind-address", metricsAddr,
		"--exclude-namespaces", "kube-system," + excludedNamespace}})
	for _, tc := range []struct {
		name string
		run  func(*testing.T, *framework.Configstamp)
	}{
		{"CreateStampsEveryReferenceForm", testCreateStampsEveryForm},
		{"OptOut", testOptOut},
		{"WebhookTLS", testWebhookTLS},
		{"DryRun", testDryRun},
		{"Audit", testAudit},
		{"MalformedRequest", testMalformedRequest},
		{"DataChangeRolls", testDataChangeRolls},
		{"InvisibleChangesRollNothing", testInvisibleChangesRollNothing},
		{"MissingCreatedDeleted", testMissingCreatedDeleted},
		{"BurstWithinDebounce", testBurstWithinDebounce},
		{"SpacedWritesUnderDebounce", testSpacedWritesUnderDebounce},
		{"ConfigThenDeployment", testConfigThenDeployment},
		{"ExcludedNamespace", testExcludedNamespace},
		{"MatchConditions", testMatchConditions},
		{"Metrics", func(t *testing.T, cs *framework.Configstamp) { testMetrics(t, cs, metricsAddr) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, cs)
		})
	}
}
