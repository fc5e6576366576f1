package faults

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/bench"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

// TestRolesSplit runs configstamp as the chart's split layout does: one --role webhook
// process and two --role watcher replicas electing a leader, all as one user (as the
// chart runs both roles as one ServiceAccount: the webhook honours the nudges and
// records of its own user only; test/deploy runs both under the chart's RBAC). A ConfigMap edit rolls each consumer
// exactly once; the leader is killed (SIGKILL: the Lease moves only when it expires)
// inside the debounce window while admissions go on: every admission is answered
// stamped, the standby takes over and finishes. The API server's audit log shows the
// webhook process (its requests carry the user agent configstamp-webhook) never listed
// or watched a workload or a source, nor took a Lease or patched a workload: it held no
// informer but the Namespaces'. The audit log is the
// API server's own record, so a webhook that started any informer (denied or not)
// would show there, whatever configstamp's code reports about itself.
func TestRolesSplit(t *testing.T) {
	mark := bench.MarkAudit(env.Cluster.AuditLog)
	name := registration(t)
	var hook *cs
	var p *pair
	var probes [3]string // the watchers', the webhook's
	fleets := twoWays(t, 3, func() {
		probes[2] = freeAddr(t)
		o, addr := withMetrics(t, framework.Options{Args: []string{"--role", "webhook", "--dev-registration-name", name, "--health-probe-bind-address", probes[2]}})
		hook = watch(t, env.Start(t, o), addr)
		p, probes[0], probes[1] = startWatchers(t, name, "--debounce", "3s")
	})
	leader := p.leader(t)
	// Every process ready: the webhook serving, each watcher (standby too) with its
	// caches synced.
	for _, addr := range probes {
		framework.Eventually(t, time.Minute, "ready at "+addr, func() error { return ready(addr) })
	}

	stop := admitAll(t, fleets[0].ns)
	editAll(t, fleets, "2")
	inDebounce(t, p.replicas[leader], len(fleets))
	p.replicas[leader].Kill()
	killed := time.Now()
	t.Logf("killed watcher replica %d (the leader)", leader)
	p.takenOver(t, 1-leader, killed)
	exactlyOnce(t, fleets, 2, killed, "the watcher leader was killed", p.replicas[:]...)
	if n := stop(); n == 0 {
		t.Fatal("no admission was made while the lease moved")
	} else {
		t.Logf("%d admissions during the lease move, every one stamped", n)
	}
	if !hook.Alive() {
		t.Fatal("the webhook process exited")
	}
	if !strings.Contains(hook.Output(), `"msg":"Stamped config hash"`) {
		t.Fatal("the webhook process stamped nothing")
	}

	var seen int
	var wrong []string
	err := bench.ReadAuditStrict(env.Cluster.AuditLog, mark, func(ev *bench.AuditEvent) {
		if ev.UserAgent != webhookAgent {
			return
		}
		seen++
		r := ev.ObjectRef.Resource
		switch {
		case r == "leases",
			(ev.Verb == "list" || ev.Verb == "watch") && r != "namespaces" && r != "mutatingwebhookconfigurations",
			ev.Verb == "patch" && r != "mutatingwebhookconfigurations":
			wrong = append(wrong, ev.Verb+" "+r)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen == 0 {
		t.Fatalf("the audit log shows no request of user agent %s", webhookAgent)
	}
	if len(wrong) > 0 {
		t.Fatalf("the webhook process made %d requests of the watcher's kind: %v", len(wrong), wrong)
	}
	t.Logf("the webhook process made %d requests, none of a watcher's kind", seen)
}

// webhookAgent is the user agent of the webhook role's requests.
const webhookAgent = "configstamp-webhook"

// startWatchers starts two --role watcher replicas electing a leader on a Lease of the
// test's own, reading coverage from the registration name (the webhook process's).
func startWatchers(t *testing.T, name string, args ...string) (p *pair, probe0, probe1 string) {
	t.Helper()
	leaseNamespace := env.NewNamespace(t, false)
	t.Cleanup(func() {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNamespace}}
		if err := client.IgnoreNotFound(env.Client.Delete(bg, ns)); err != nil {
			t.Logf("delete namespace %s: %v", leaseNamespace, err)
		}
	})
	args = append(args, "--role", "watcher", "--leader-elect", "--leader-election-namespace", leaseNamespace, "--leader-election-id", name,
		"--registration-name", name)
	p = &pair{}
	var probes [2]string
	for i := range p.replicas {
		probes[i] = freeAddr(t)
		p.opts[i], p.addrs[i] = withMetrics(t, framework.Options{NoWebhook: true, Args: append(args[:len(args):len(args)], "--health-probe-bind-address", probes[i])})
		p.restart(t, i)
	}
	return p, probes[0], probes[1]
}

// freeAddr is a free loopback address.
func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// ready asks addr's /readyz.
func ready(addr string) error {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}

// admitAll makes server-side dry-run creates of a Deployment that consumes the fleet's
// ConfigMap in ns, one after another, until stop, failing the test at once for one
// answered unstamped (the webhook failed open) or refused. stop returns how many were
// made.
func admitAll(t *testing.T, ns string) (stop func() int) {
	t.Helper()
	made := &atomic.Int64{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	var failed atomic.Value
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			d := deployment(ns, "admitted")
			if err := env.Client.Create(bg, d, client.DryRunAll); err != nil {
				failed.CompareAndSwap(nil, fmt.Sprintf("admission %d: %v", made.Load()+1, err))
				return
			}
			made.Add(1)
			if d.Spec.Template.Annotations[stamp.HashAnnotation] == "" {
				failed.CompareAndSwap(nil, fmt.Sprintf("admission %d answered unstamped", made.Load()))
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	var once sync.Once
	stop = func() int {
		once.Do(func() { close(done); wg.Wait() })
		if f := failed.Load(); f != nil {
			t.Fatal(f)
		}
		return int(made.Load())
	}
	t.Cleanup(func() { once.Do(func() { close(done); wg.Wait() }) })
	return stop
}
