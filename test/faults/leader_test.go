package faults

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/certs"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

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
		inDebounce(t, p.replicas[leader], len(fleets))
		killed := p.kill(t, leader)
		if n := sum(p.replicas[leader].nudgedLines()); n != 0 {
			t.Fatalf("the killed leader had nudged %d Deployments: the kill missed the debounce window", n)
		}
		p.takenOver(t, 1-leader, killed)
		exactlyOnce(t, fleets, 2, killed, "the leader was killed", p.replicas[:]...)
	})
	t.Run("in a fan-out", func(t *testing.T) {
		var p *pair
		fleets := twoWays(t, 25, func() { p = startPair(t) })
		leader := p.leader(t)
		editAll(t, fleets, "2")
		fanOutStarted(t, p.replicas[leader])
		killed := p.kill(t, leader)
		old := p.replicas[leader]
		midFanOut(t, "the leader was killed", sum(old.nudgedLines()), total(fleets))
		p.takenOver(t, 1-leader, killed)
		p.restart(t, leader)
		exactlyOnce(t, fleets, 2, killed, "the leader was killed", p.replicas[:]...)
		nudgedAfter(t, "the kill (by the new leader)", sum(p.replicas[1-leader].nudgedLines()))
		if p.led(leader) {
			t.Error("the restarted replica took the lease back")
		}
	})
}

// TestLeaderPaused stops the leader (SIGSTOP, as a machine that stalls or a long
// garbage collection pause would) in the middle of a fan-out, until the standby has
// taken the Lease over, and then lets it go on (SIGCONT): for a moment two replicas
// believe they lead, the old one with its checks in flight and its cache behind. Every
// Deployment must still roll exactly once.
func TestLeaderPaused(t *testing.T) {
	var p *pair
	fleets := twoWays(t, 25, func() { p = startPair(t) })
	leader := p.leader(t)
	old := p.replicas[leader]
	editAll(t, fleets, "2")
	fanOutStarted(t, old)
	p.px.SetTarget(fmt.Sprintf("127.0.0.1:%d", p.ports[1-leader])) // its endpoint is not ready either
	t.Cleanup(func() { _ = syscall.Kill(old.PID(), syscall.SIGCONT) })
	if err := syscall.Kill(old.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	midFanOut(t, "the leader was paused", sum(old.nudgedLines()), total(fleets))
	p.takenOver(t, 1-leader, paused)
	if err := syscall.Kill(old.PID(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("resumed the old leader %.1fs after the pause", time.Since(paused).Seconds())
	exactlyOnce(t, fleets, 2, paused, "the leader was paused", p.replicas[:]...)
	before := sum(old.nudgedLines())
	nudgedAfter(t, "the pause (by the new leader)", sum(p.replicas[1-leader].nudgedLines()))
	state := "exited"
	if old.Alive() {
		state = "still runs"
	}
	t.Logf("the old leader nudged %d Deployments in all and %s (exit code %d); its last lines:\n%s", before, state, old.ExitCode(), tail(old.Output(), 6))
}

// pair is two replicas behind one webhook address (a proxy sends admission to one).
type pair struct {
	replicas [2]*cs
	opts     [2]framework.Options
	addrs    [2]string // metrics
	ports    [2]int    // webhook
	px       *framework.Proxy
}

// startPair starts two replicas with leader election, sharing a serving certificate,
// a registration and a Lease of the test's own, in a namespace of its own that is
// deleted when the test ends (after the replicas stop).
func startPair(t *testing.T, args ...string) *pair {
	t.Helper()
	p := newPair(t, args...)
	for i := range p.replicas {
		p.restart(t, i)
	}
	return p
}

// newPair is startPair without starting the replicas.
func newPair(t *testing.T, args ...string) *pair {
	t.Helper()
	certDir := t.TempDir()
	if _, err := certs.WriteSelfSigned(certDir, "127.0.0.1", "localhost"); err != nil {
		t.Fatal(err)
	}
	leaseNamespace := env.NewNamespace(t, false)
	t.Cleanup(func() {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNamespace}}
		if err := client.IgnoreNotFound(env.Client.Delete(bg, ns)); err != nil {
			t.Logf("delete namespace %s: %v", leaseNamespace, err)
		}
	})
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
		p.opts[i], p.addrs[i] = withMetrics(t, framework.Options{WebhookURL: "https://" + p.px.Addr, WebhookPort: p.ports[i], Args: args})
	}
	return p
}

// restart starts replica i (again).
func (p *pair) restart(t *testing.T, i int) {
	t.Helper()
	p.replicas[i] = watch(t, env.Start(t, p.opts[i]), p.addrs[i])
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
	t.Logf("replica %d took over %.1fs after the fault", i, time.Since(since).Seconds())
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
