package badinput

import (
	"testing"

	"github.com/configstamp/configstamp/test/framework"
)

// keyNS holds the HMAC key of Secret digests.
const keyNS = "configstamp-system"

// TestBadInput runs the cases that share one configstamp process (Secrets on), in
// parallel, each in its own namespace.
func TestBadInput(t *testing.T) {
	env.CreateNamespace(t, keyNS, false)
	s := &suite{metrics: freeAddr(t)}
	s.cs = env.Start(t, framework.Options{Args: []string{"--metrics-bind-address", s.metrics,
		"--secrets", "--hash-key", keyNS + "/hash-key",
		"--max-sources", "512"}}) // FiveHundredConfigMaps: past the default cap of 256 (TestBounds)
	s.key = readKey(t)
	for _, tc := range []struct {
		name string
		run  func(*testing.T, *suite)
	}{
		{"MalformedReviews", testMalformedReviews},
		{"NearSizeLimits", testNearSizeLimits},
		{"AnnotationsAtTheLimit", testAnnotationsAtTheLimit},
		{"LargeConfigMaps", testLargeConfigMaps},
		{"LargeSecrets", testLargeSecrets},
		{"OddKeysAndNames", testOddKeysAndNames},
		{"DuplicateReferences", testDuplicateReferences},
		{"OneConfigMapHundredTimes", testOneConfigMapHundredTimes},
		{"FiveHundredConfigMaps", testFiveHundredConfigMaps},
		{"MissingAndInvalidReferences", testMissingAndInvalidReferences},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, s)
		})
	}
}

// suite is the configstamp process the cases share.
type suite struct {
	cs      *framework.Configstamp
	metrics string // address of /metrics
	key     []byte // HMAC key of Secret digests
	// attacker is TestBounds' opted-in namespace, where its forged reviews come from.
	attacker string
}
