package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/watcher"
)

// cloudEvent is what the test reads of a notification.
type cloudEvent struct {
	SpecVersion string `json:"specversion"`
	ID          string `json:"id"`
	Type        string `json:"type"`
	Subject     string `json:"subject"`
	Data        struct {
		Workloads []struct{ Workload, Reason string }
	} `json:"data"`
}

// receiver is a notification endpoint for the messages of namespace ns (configstamp
// also notifies of what it catches up on in other tests' namespaces): it answers 500 to
// the first fail requests about ns.
type receiver struct {
	ns       string
	mu       sync.Mutex
	fail     int
	requests []string
	types    []string
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	var ev cloudEvent
	_ = json.Unmarshal(b, &ev)
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Subject != r.ns && !strings.HasPrefix(ev.Subject, r.ns+"/") {
		return
	}
	r.requests = append(r.requests, string(b))
	r.types = append(r.types, req.Header.Get("Content-Type"))
	if len(r.requests) <= r.fail {
		w.WriteHeader(http.StatusInternalServerError)
	}
}

// messages are the distinct messages about ns received (a retry repeats its id), in
// order, and every request about ns.
func (r *receiver) messages(t *testing.T) (msgs []cloudEvent, bodies []string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for i, b := range r.requests {
		var ev cloudEvent
		if err := json.Unmarshal([]byte(b), &ev); err != nil || ev.ID == "" || r.types[i] != "application/cloudevents+json" {
			t.Fatalf("not a structured CloudEvent (%s, %v): %s", r.types[i], err, b)
		}
		if !seen[ev.ID] {
			seen[ev.ID] = true
			msgs = append(msgs, ev)
		}
	}
	return msgs, slices.Clone(r.requests)
}

// ofType are the messages of type typ.
func ofType(msgs []cloudEvent, typ string) []cloudEvent {
	var out []cloudEvent
	for _, m := range msgs {
		if m.Type == typ {
			out = append(out, m)
		}
	}
	return out
}

// listing waits for the n-th rollout message and checks that it lists workloads
// (sorted), each with a reason containing every one of reasons.
func (r *receiver) listing(t *testing.T, n int, reasons []string, workloads ...string) {
	t.Helper()
	var msg cloudEvent
	framework.Eventually(t, 90*time.Second, fmt.Sprintf("notification %d", n), func() error {
		msgs, _ := r.messages(t)
		msgs = ofType(msgs, "io.configstamp.rolled")
		if len(msgs) < n {
			return fmt.Errorf("%d messages", len(msgs))
		}
		msg = msgs[n-1]
		return nil
	})
	var got []string
	for _, w := range msg.Data.Workloads {
		got = append(got, w.Workload)
		for _, reason := range reasons {
			if !strings.Contains(w.Reason, reason) {
				t.Errorf("notification %d: %s: reason %q lacks %q", n, w.Workload, w.Reason, reason)
			}
		}
	}
	if msg.SpecVersion != "1.0" || msg.Type != "io.configstamp.rolled" || !slices.Equal(got, workloads) {
		t.Fatalf("notification %d: %+v, want a rollout of %v", n, msg, workloads)
	}
}

// TestNotifications: with notifications on (the URL in a Secret), a local receiver gets
// exactly one CloudEvent per source change, listing every workload it rolled and the
// keys that changed, and one listing every paused workload it held; none for a change
// that rolls nothing (a label, a key no pod consumes); a 500 is retried; no payload
// holds a value (the Secret's hunter2).
func TestNotifications(t *testing.T) {
	ns := env.NewNamespace(t, true)
	rc := &receiver{ns: ns, fail: 1}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	urlNS := env.NewNamespace(t, false)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: urlNS, Name: "notify"}, StringData: map[string]string{"url": srv.URL}})
	env.Start(t, framework.Options{Args: []string{"--secrets", "--notify-url-secret", urlNS + "/notify", "--notify-batch-window", "3s",
		"--min-rollout-interval", "0"}})

	values := []string{"hunter2", "swordfish", "value-blue", "value-green", "value-unseen-1", "value-unseen-2"}
	// shared has many keys: their digests are too long for a digest cache entry (over
	// 512 bytes), and each workload's rollout still names the key that changed.
	sharedData := map[string]string{"mode": "value-blue", "level": "info"}
	for i := range 40 {
		sharedData[fmt.Sprintf("setting-%02d", i)] = "on"
	}
	create(t, configMap(ns, "shared", sharedData))
	create(t, configMap(ns, "partial", map[string]string{"seen": "1", "unseen": "value-unseen-1"}))
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, StringData: map[string]string{"password": "hunter2"}})
	// "one" mounts shared, the key seen of partial and the Secret; "two" the key mode of
	// shared (its digest of shared differs from one's) and the Secret.
	db := corev1.Volume{Name: "db", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "db"}}}
	one := podWithItems("partial", "seen")
	one.Volumes = append(one.Volumes, podWithVolumes("shared").Volumes[0], db)
	two := podWithItems("shared", "mode")
	two.Volumes = append(two.Volumes, db)
	createDeployment(t, ns, "one", one)
	createDeployment(t, ns, "two", two)
	// Paused, held: p1 mounts shared, p2 its key mode (their digests of it differ).
	for name, spec := range map[string]corev1.PodSpec{"p1": podWithVolumes("shared"), "p2": podWithItems("shared", "mode")} {
		d := deployment(name, spec)
		d.Namespace, d.Spec.Paused = ns, true
		create(t, d)
	}
	for _, name := range []string{"one", "two"} {
		d := getDeployment(t, ns, name)
		if !strings.Contains(d.Spec.Template.Annotations[stamp.SourcesAnnotation], "secret/db=") || d.Annotations[stamp.KeysAnnotation] == "" {
			t.Fatalf("%s: not stamped with keys: %v %v", name, d.Spec.Template.Annotations, d.Annotations)
		}
	}

	// No-ops: a label, a key no pod consumes.
	labelConfigMap(t, ns, "shared", "release", "r2")
	setData(t, ns, "partial", "unseen", "value-unseen-2")
	framework.Consistently(t, settle+3*time.Second, "no notification", func() error {
		if msgs, _ := rc.messages(t); len(msgs) > 0 {
			return fmt.Errorf("notified of a no-op: %+v", msgs)
		}
		return nil
	})

	// One change, two rollouts, one message (its first try answered 500).
	setData(t, ns, "shared", "mode", "value-green")
	rc.listing(t, 1, []string{"configmap/shared changed (digest ", "; keys: mode)"}, "Deployment/one", "Deployment/two")
	framework.Eventually(t, 30*time.Second, "the message answered 500 retried", func() error {
		if _, bodies := rc.messages(t); len(bodies) < 2 || bodies[0] != bodies[1] {
			return fmt.Errorf("%d requests", len(bodies))
		}
		return nil
	})
	d := getDeployment(t, ns, "one")
	if cause := d.Annotations[stamp.ChangeCauseAnnotation]; !strings.HasSuffix(cause, "; keys: mode)") {
		t.Errorf("change cause %q does not name the key", cause)
	}
	framework.Eventually(t, 30*time.Second, "ConfigChanged event naming the key", func() error {
		return findEvent(ns, "two", watcher.ReasonConfigChanged, "keys: mode)")
	})

	// A Secret's change: one more message, naming its key, never its value.
	sec := &corev1.Secret{}
	if err := k8s.Get(bg, client.ObjectKey{Namespace: ns, Name: "db"}, sec); err != nil {
		t.Fatal(err)
	}
	sec.Data = map[string][]byte{"password": []byte("swordfish")}
	if err := k8s.Update(bg, sec); err != nil {
		t.Fatal(err)
	}
	rc.listing(t, 2, []string{"secret/db changed (digest ", "; keys: password)"}, "Deployment/one", "Deployment/two")
	framework.Consistently(t, settle+3*time.Second, "exactly two rollout notifications and one of the paused", func() error {
		msgs, _ := rc.messages(t)
		held := ofType(msgs, "io.configstamp.held.paused")
		if len(ofType(msgs, "io.configstamp.rolled")) != 2 || len(held) != 1 || len(msgs) != 3 {
			return fmt.Errorf("%d messages: %+v", len(msgs), msgs)
		}
		if w := held[0].Data.Workloads; len(w) != 2 || w[0].Workload != "Deployment/p1" || w[1].Workload != "Deployment/p2" {
			return fmt.Errorf("held: %+v, want p1 and p2", w)
		}
		return nil
	})
	_, bodies := rc.messages(t)
	for _, b := range bodies {
		for _, v := range values {
			if strings.Contains(b, v) {
				t.Errorf("a notification holds the value %q: %s", v, b)
			}
		}
	}
}
