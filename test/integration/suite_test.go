package integration

import "testing"

// TestWithRunningConfigstamp runs the scenarios that share one configstamp process, in
// parallel, each in its own namespace.
func TestWithRunningConfigstamp(t *testing.T) {
	cs := startConfigstamp(t, procOptions{})
	for _, tc := range []struct {
		name string
		run  func(*testing.T, *configstamp)
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
