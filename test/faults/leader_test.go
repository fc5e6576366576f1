package faults

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/configstamp/configstamp/certs"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

// leaseNamespace holds the scenarios' Leases.
const leaseNamespace = "configstamp-system"

// TestLeaderKilled runs two replicas with leader election and kills the leader with
// SIGKILL (no graceful shutdown: the Lease is not released, the standby waits for it to
// expire) inside the debounce window of a change, and in the middle of a fan-out. The
// standby must take over and finish. In the debounce case the killed replica stays
// dead; in the fan-out case it is started again once the standby leads (as its pod
// would be restarted) and stands by.
func TestLeaderKilled(t *testing.T) {
	t.Run("in the debounce window", func(t *testing.T) {
		var p *pair
		fleets := twoWays(t, 3, func() { p = startPair(t, "--debounce", "3s") })
		leader := p.leader(t)
		editAll(t, fleets, "2")
		killed := p.kill(t, leader)
		p.takenOver(t, 1-leader, killed)
		exactlyOnce(t, fleets, 2, killed, "the leader was killed")
	})
	t.Run("in a fan-out", func(t *testing.T) {
		var p *pair
		fleets := twoWays(t, 25, func() { p = startPair(t) })
		leader := p.leader(t)
		editAll(t, fleets, "2")
		done := fanOutStarted(t, fleets)
		killed := p.kill(t, leader)
		t.Logf("the leader was killed with %d of %d Deployments stamped", done, total(fleets))
		p.takenOver(t, 1-leader, killed)
		p.replicas[leader] = env.Start(t, p.opts[leader])
		exactlyOnce(t, fleets, 2, killed, "the leader was killed")
		if p.led(leader) {
			t.Error("the restarted replica took the lease back")
		}
	})
}

// pair is two replicas behind one webhook address (a proxy sends admission to one).
type pair struct {
	replicas [2]*framework.Configstamp
	opts     [2]framework.Options
	ports    [2]int
	px       *framework.Proxy
}

// startPair starts two replicas with leader election, sharing a serving certificate,
// a registration and a Lease of the test's own.
func startPair(t *testing.T, args ...string) *pair {
	t.Helper()
	certDir := t.TempDir()
	if _, err := certs.WriteSelfSigned(certDir, "127.0.0.1", "localhost"); err != nil {
		t.Fatal(err)
	}
	env.CreateNamespace(t, leaseNamespace, false)
	name := registration(t)
	args = append(args, "--leader-elect", "--leader-election-namespace", leaseNamespace, "--leader-election-id", name,
		"--webhook-cert-dir", certDir, "--dev-registration-name", name)
	p := &pair{}
	for i := range p.ports {
		port, err := cluster.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		p.ports[i] = port
	}
	p.px = framework.NewProxy(t, fmt.Sprintf("127.0.0.1:%d", p.ports[0]))
	for i := range p.replicas {
		p.opts[i] = framework.Options{WebhookURL: "https://" + p.px.Addr, WebhookPort: p.ports[i], Args: args}
		p.replicas[i] = env.Start(t, p.opts[i])
	}
	return p
}

// led reports whether replica i has acquired the Lease (client-go's leader election
// logs it).
func (p *pair) led(i int) bool {
	return strings.Contains(p.replicas[i].Output(), `"msg":"Successfully acquired lease"`)
}

// leader waits until one replica leads and returns it.
func (p *pair) leader(t *testing.T) int {
	t.Helper()
	leader := -1
	framework.Eventually(t, time.Minute, "a leader", func() error {
		switch a, b := p.led(0), p.led(1); {
		case a && b:
			t.Fatal("both replicas acquired the lease")
		case a:
			leader = 0
		case b:
			leader = 1
		default:
			return fmt.Errorf("no replica leads yet")
		}
		return nil
	})
	return leader
}

// kill sends admission to the other replica and kills replica i with SIGKILL.
func (p *pair) kill(t *testing.T, i int) time.Time {
	t.Helper()
	p.px.SetTarget(fmt.Sprintf("127.0.0.1:%d", p.ports[1-i]))
	p.replicas[i].Kill()
	t.Logf("killed replica %d (the leader)", i)
	return time.Now()
}

// takenOver waits until replica i leads.
func (p *pair) takenOver(t *testing.T, i int, since time.Time) {
	t.Helper()
	framework.Eventually(t, time.Minute, "the standby takes over", func() error {
		if !p.led(i) {
			return fmt.Errorf("replica %d does not lead", i)
		}
		return nil
	})
	t.Logf("replica %d took over %.1fs after the kill", i, time.Since(since).Seconds())
}
