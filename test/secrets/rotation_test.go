package secrets

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/certs"
	"github.com/configstamp/configstamp/internal/hashkey"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/hashdoc"
)

// TestKeyRotationReplicasDisagree rotates the hash key under two replicas that read it at
// different moments (--hash-key-refresh of one second against one hour), in both lag
// orders: the leader's watcher behind the replica that answers admission, and ahead of
// it. A ConfigMap edit right after the rotation rolls its Deployment once, under the new
// key; the next admission goes to the other replica (a Service spreads them) and a
// label-only edit of the ConfigMap has the watcher check the Deployment again: nothing
// more rolls. Without the key fingerprints in records and nudges, the replica behind
// judges the other's stamp as a change and rolls the Deployment a second time.
func TestKeyRotationReplicasDisagree(t *testing.T) {
	keyNS := env.NewNamespace(t, false) // the key Secrets and the Lease: not opted in
	certDir := t.TempDir()
	if _, err := certs.WriteSelfSigned(certDir, "127.0.0.1", "localhost"); err != nil {
		t.Fatal(err)
	}
	for i, order := range []struct {
		name string
		// The key refresh of the leader (whose watcher nudges) and of the replica that
		// answers the first admissions after the rotation.
		leader, answering string
	}{
		{"the watcher behind the webhook replica", "1h", "1s"},
		{"the watcher ahead of the webhook replica", "1s", "1h"},
	} {
		t.Run(order.name, func(t *testing.T) {
			ns := env.NewNamespace(t, true)
			// Once its replicas are stopped, the namespace opts out: the next replicas,
			// under other keys, would take its stamps for a rotation and roll them.
			t.Cleanup(func() {
				patch(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, `{"metadata":{"labels":{"`+stamp.InjectLabel+`":null}}}`)
			})
			keyName := fmt.Sprintf("rotated-%d", i)
			oldKey, newKey := []byte(strings.Repeat("o", 32)), []byte(strings.Repeat("n", 32))
			createSecret(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: keyNS, Name: keyName}, Data: map[string][]byte{hashkey.DataKey: oldKey}})

			ports := []int{freePort(t), freePort(t)}
			px := framework.NewProxy(t, fmt.Sprintf("127.0.0.1:%d", ports[0]))
			start := func(port int, refresh string) *framework.Configstamp {
				return env.Start(t, framework.Options{WebhookURL: "https://" + px.Addr, WebhookPort: port, Args: []string{
					"--webhook-cert-dir", certDir, "--leader-elect", "--leader-election-namespace", keyNS, "--leader-election-id", keyName,
					"--hash-key", keyNS + "/" + keyName, "--hash-key-refresh", refresh, "--min-rollout-interval", "0"}})
			}
			leader := start(ports[0], order.leader)
			framework.Eventually(t, time.Minute, "the first replica leads", func() error {
				if !strings.Contains(leader.Output(), `"msg":"Successfully acquired lease"`) {
					return fmt.Errorf("no lease yet")
				}
				return nil
			})
			answering := start(ports[1], order.answering)
			switchTo(t, px, ports[1])

			names := []string{"a", "b"}
			for _, name := range names {
				createConfigMap(t, ns, name, map[string]string{"k": "1"})
				createDeployment(t, ns, name, container(corev1.Container{}, configMapVolume(name)))
				env.ExpectReplicaSets(t, ns, name, 1, 0) // held over settle once, at the end
				stampedWith(t, ns, name, oldKey)
			}

			// Rotate; the replica with the one-second refresh follows.
			sec := getSecret(t, keyNS, keyName)
			sec.Data[hashkey.DataKey] = newKey
			if err := env.Client.Update(bg, sec); err != nil {
				t.Fatal(err)
			}
			ahead := leader
			if order.answering == "1s" {
				ahead = answering
			}
			framework.Eventually(t, 30*time.Second, "the replica with the short refresh follows the new key", func() error {
				if !strings.Contains(ahead.Output(), "The hash key changed") {
					return fmt.Errorf("not yet")
				}
				return nil
			})

			// A config change: one rollout (under the new key: checked last, after the
			// count of rollouts).
			for _, name := range names {
				setConfigMapData(t, ns, name, "k", "2")
			}
			for _, name := range names {
				env.ExpectReplicaSets(t, ns, name, 2, 0)
				if n := updatesStamped(answering, ns, name); n != 1 {
					t.Fatalf("%s: the answering replica stamped %d updates, want the one rollout", name, n)
				}
			}

			// The next admissions go to the other replica, and the watcher checks each
			// Deployment again after a write of its ConfigMap that changes no content.
			switchTo(t, px, ports[0])
			before := map[string]int{}
			for _, name := range names {
				before[name] = checks(leader, ns, name)
				patch(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, `{"metadata":{"labels":{"touched":"yes"}}}`)
			}
			for _, name := range names {
				checkedAfter(t, leader, ns, name, before[name])
				rollouts(t, ns, name, 2)
				stampedWith(t, ns, name, newKey)
				if d := env.Deployment(t, ns, name); !strings.HasSuffix(d.Annotations[stamp.ObservedAnnotation], " key="+hashdoc.KeyFingerprint(newKey)) {
					t.Errorf("%s: record %q, want one under the new key", name, d.Annotations[stamp.ObservedAnnotation])
				}
			}
			t.Logf("nudges kept under another key: %d; checks retried on a key mismatch: %d; keys read again by the answering replica: %d",
				msgCount(answering, "Kept the stored config hash: the nudge was sent under another hash key"),
				msgCount(leader, "Not rolled: the hash keys disagree; retrying"), strings.Count(answering.Output(), "The hash key changed"))
			for _, p := range []*framework.Configstamp{leader, answering} {
				for _, rec := range p.Logs() {
					// Only this test's namespace: other tests' workloads left in the
					// cluster are checked too, under other settings (TestCSI's).
					if logNamespace(rec) != ns {
						continue
					}
					if rec["reason"] == "StampBypassed" || strings.Contains(fmt.Sprint(rec["msg"]), "bypassed the webhook") {
						t.Errorf("a bypass reported: %v", rec)
					}
				}
			}
		})
	}
}

// switchTo sends admissions to the replica on port, and waits until three dry-run
// creates in a row come back stamped: the API server has dropped the connections the
// switch closed (a request on one of those fails open, unstamped).
func switchTo(t *testing.T, px *framework.Proxy, port int) {
	t.Helper()
	px.Switch(fmt.Sprintf("127.0.0.1:%d", port))
	ok := 0
	framework.Eventually(t, 30*time.Second, "admissions answered after the switch", func() error {
		d := framework.ProbeDeployment()
		if err := env.Client.Create(bg, d, client.DryRunAll); err != nil || d.Spec.Template.Annotations[stamp.HashAnnotation] == "" {
			ok = 0
			return fmt.Errorf("dry-run create not stamped: %v", err)
		}
		if ok++; ok < 3 {
			return fmt.Errorf("%d stamped in a row", ok)
		}
		return nil
	})
}

// msgCount counts a process's log lines with msg.
func msgCount(p *framework.Configstamp, msg string) int {
	n := 0
	for _, rec := range p.Logs() {
		if rec["msg"] == msg {
			n++
		}
	}
	return n
}

// updatesStamped counts a process's log lines of a changed stamp on an UPDATE of ns/name.
func updatesStamped(p *framework.Configstamp, ns, name string) int {
	n := 0
	for _, rec := range p.Logs() {
		if rec["msg"] == "Stamped config hash" && rec["namespace"] == ns && rec["name"] == name && rec["operation"] == "UPDATE" {
			n++
		}
	}
	return n
}

func freePort(t *testing.T) int {
	t.Helper()
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// logNamespace is the namespace a log record of configstamp's is about: its own
// namespace value, or its Event's object's.
func logNamespace(rec map[string]any) string {
	if ns, ok := rec["namespace"].(string); ok {
		return ns
	}
	if obj, ok := rec["object"].(map[string]any); ok {
		ns, _ := obj["namespace"].(string)
		return ns
	}
	return ""
}
