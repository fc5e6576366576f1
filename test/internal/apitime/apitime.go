// Package apitime holds what the tests need of the API server's clock: its times
// (creationTimestamp, managedFields) have one-second resolution, so an object made
// after another is only seen as later when a second boundary lies between them.
package apitime

import "time"

// margin keeps clear of the boundary itself.
const margin = 20 * time.Millisecond

// NextSecond returns once the clock has passed into a later second than when it was
// called (the test's and the API server's clock are the same): whatever the API
// server stamped before the call has an earlier time, to the second, than whatever it
// stamps after. It waits about half a second on average, where a fixed sleep of 1.1 s
// did the same.
func NextSecond() {
	now := time.Now()
	time.Sleep(now.Truncate(time.Second).Add(time.Second + margin).Sub(now))
}
