package integration

import (
	"testing"

	"github.com/configstamp/configstamp/test/framework"
)

// TestWithRunningConfigstamp runs the scenarios that share one configstamp process, in
// parallel, each in its own namespace.
func TestWithRunningConfigstamp(t *testing.T) {
	cs := env.Start(t, framework.Options{})
	for _, tc := range []struct {
		name string
		run  func(*testing.T, *framework.Configstamp)
	}{
		{"CreateStampsEveryReferenceForm", testCreateStampsEveryForm},
		{"OptOut", testOptOut},
		{"DryRun", testDryRun},
		{"Audit", testAudit},
		{"MalformedRequest", testMalformedRequest},
		{"DataChangeRolls", testDataChangeRolls},
		{"InvisibleChangesRollNothing", testInvisibleChangesRollNothing},
		{"MissingCreatedDeleted", testMissingCreatedDeleted},
		{"BurstWithinDebounce", testBurstWithinDebounce},
		{"SpacedWritesUnderDebounce", testSpacedWritesUnderDebounce},
		{"ConfigThenDeployment", testConfigThenDeployment},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, cs)
		})
	}
}
