package notify

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

func rolled(workload string) Event {
	return Event{Kind: Rolled, Namespace: "team-a", Workload: workload, Change: "configmap/app=77c0de12ab34", Sources: []string{"configmap/app"},
		Reason: "configmap/app changed (digest 3f2a1c9e0b7d -> 77c0de12ab34; keys: mode)", Time: time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)}
}

func testMessage() message {
	return toMessage([]Event{rolled("Deployment/web"), rolled("Deployment/api")})
}

func TestCloudEvent(t *testing.T) {
	ct, body, err := cloudEvent(testMessage(), "configstamp", "id-1")
	if err != nil || ct != "application/cloudevents+json" {
		t.Fatalf("content type %q, %v", ct, err)
	}
	var ev struct {
		SpecVersion, ID, Source, Type, Time, Subject, DataContentType string
		Data                                                          cloudEventData
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.SpecVersion != "1.0" || ev.ID != "id-1" || ev.Source != "configstamp" || ev.Type != "io.configstamp.rolled" ||
		ev.Time != "2026-12-05T10:00:00Z" || ev.Subject != "team-a/configmap/app" || ev.DataContentType != "application/json" {
		t.Fatalf("attributes %+v", ev)
	}
	if len(ev.Data.Workloads) != 2 || ev.Data.Workloads[0].Workload != "Deployment/api" || !strings.Contains(ev.Data.Workloads[0].Reason, "keys: mode") {
		t.Fatalf("data %+v", ev.Data)
	}
}

func TestSlack(t *testing.T) {
	ct, body, err := slack(testMessage(), "", "")
	var m map[string]string
	if err != nil || ct != "application/json" || json.Unmarshal(body, &m) != nil || len(m) != 1 {
		t.Fatalf("%s %s %v", ct, body, err)
	}
	want := "configstamp rolled 2 workloads in namespace team-a after a change of configmap/app\n" +
		"• Deployment/api: configmap/app changed (digest 3f2a1c9e0b7d -> 77c0de12ab34; keys: mode)\n" +
		"• Deployment/web: configmap/app changed (digest 3f2a1c9e0b7d -> 77c0de12ab34; keys: mode)"
	if m["text"] != want {
		t.Fatalf("text %q, want %q", m["text"], want)
	}
}

func TestTeams(t *testing.T) {
	_, body, err := teams(testMessage(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Type        string
		Attachments []struct {
			ContentType string
			Content     struct {
				Type, Version string
				Body          []struct{ Type, Text string }
			}
		}
	}
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	if m.Type != "message" || len(m.Attachments) != 1 || m.Attachments[0].ContentType != "application/vnd.microsoft.card.adaptive" {
		t.Fatalf("envelope %s", body)
	}
	c := m.Attachments[0].Content
	if c.Type != "AdaptiveCard" || len(c.Body) != 3 || !strings.HasPrefix(c.Body[0].Text, "configstamp rolled 2 workloads") ||
		c.Body[1].Text != "- Deployment/api: configmap/app changed (digest 3f2a1c9e0b7d -> 77c0de12ab34; keys: mode)" {
		t.Fatalf("card %s", body)
	}
}

func TestUnknownFormat(t *testing.T) {
	if _, err := New(Options{Format: "email", URL: URLFromFile("/x")}); err == nil {
		t.Fatal("accepted format email")
	}
}

// receiver records the bodies it is sent; it answers 500 to the first fail requests.
type receiver struct {
	mu     sync.Mutex
	fail   int
	bodies []string
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bodies = append(r.bodies, string(b))
	if len(r.bodies) <= r.fail {
		w.WriteHeader(http.StatusInternalServerError)
	}
}

func (r *receiver) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.bodies...)
}

func start(t *testing.T, rc *receiver, o Options) *Notifier {
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	o.URL = func(context.Context) (string, error) { return srv.URL, nil }
	if o.Format == "" {
		o.Format = FormatCloudEvents
	}
	n, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = n.Start(ctx) }()
	return n
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestBatchedAndRetried(t *testing.T) {
	rc := &receiver{fail: 2}
	n := start(t, rc, Options{Window: 200 * time.Millisecond, Backoff: 10 * time.Millisecond})
	n.Notify(rolled("Deployment/a"))
	n.Notify(rolled("Deployment/b"))
	n.Notify(rolled("Deployment/a")) // the same workload again: listed once
	other := rolled("Deployment/c")
	other.Change = "configmap/app=0000000000ff"
	n.Notify(other)
	waitFor(t, "two messages sent, after two 500s", func() bool { return len(rc.got()) == 4 })
	time.Sleep(500 * time.Millisecond)
	bodies := rc.got()
	if len(bodies) != 4 || bodies[0] != bodies[1] || bodies[1] != bodies[2] {
		t.Fatalf("want one message tried three times (the same id), then another; got %d: %q", len(bodies), bodies)
	}
	var first, second struct{ Data cloudEventData }
	_ = json.Unmarshal([]byte(bodies[0]), &first)
	_ = json.Unmarshal([]byte(bodies[3]), &second)
	batches := [][]cloudEventTarget{first.Data.Workloads, second.Data.Workloads}
	if len(batches[0]) == 1 {
		batches[0], batches[1] = batches[1], batches[0]
	}
	if len(batches[0]) != 2 || batches[0][0].Workload != "Deployment/a" || batches[0][1].Workload != "Deployment/b" ||
		len(batches[1]) != 1 || batches[1][0].Workload != "Deployment/c" {
		t.Fatalf("batches %+v", batches)
	}
}

func TestGivesUpAfterMaxAttempts(t *testing.T) {
	rc := &receiver{fail: 100}
	before := count("failed")
	n := start(t, rc, Options{Window: 50 * time.Millisecond, Backoff: 5 * time.Millisecond, MaxAttempts: 3})
	n.Notify(rolled("Deployment/a"))
	waitFor(t, "the message counted failed", func() bool { return count("failed") == before+1 })
	if got := len(rc.got()); got != 3 {
		t.Fatalf("%d tries, want 3", got)
	}
}

func TestNotifyNeverBlocks(t *testing.T) {
	n, err := New(Options{Format: FormatSlack, URL: URLFromFile("/nonexistent"), Queue: 2})
	if err != nil {
		t.Fatal(err)
	}
	before := count("dropped")
	for i := range 5 { // not started: nothing takes events off the queue
		n.Notify(rolled("Deployment/" + string(rune('a'+i))))
	}
	if got := count("dropped") - before; got != 3 {
		t.Fatalf("dropped %v, want 3", got)
	}
	var off *Notifier
	off.Notify(rolled("Deployment/a")) // notifications off: a nil Notifier
}

func TestHeldReportedOnce(t *testing.T) {
	n, err := New(Options{Format: FormatSlack, URL: URLFromFile("/nonexistent")})
	if err != nil {
		t.Fatal(err)
	}
	ev := Event{Kind: HeldMissing, Namespace: "ns", Workload: "Deployment/a", Change: "configmap/x is missing", Reason: "configmap/x is missing"}
	n.Notify(ev)
	n.Notify(ev)
	if len(n.events) != 1 {
		t.Fatalf("%d held reports queued, want 1", len(n.events))
	}
}

func TestURLCheck(t *testing.T) {
	for v, ok := range map[string]bool{"https://hooks.example/x\n": true, "http://127.0.0.1:1/": true, "ftp://x": false, "hunter2": false} {
		_, err := check(v)
		if (err == nil) != ok {
			t.Errorf("check(%q) = %v", v, err)
		}
		if err != nil && strings.Contains(err.Error(), v) {
			t.Errorf("the error names the value: %v", err)
		}
	}
}

// count is the notifications counter of result.
func count(result string) float64 {
	var m dto.Metric
	_ = notifications.WithLabelValues(result).Write(&m)
	return m.GetCounter().GetValue()
}

// A receiver's redirect is not followed: the message goes nowhere else (a 307 would
// resend it to any address, inside the cluster too), and is not retried.
func TestRedirectNotFollowed(t *testing.T) {
	elsewhere := &receiver{}
	target := httptest.NewServer(elsewhere)
	t.Cleanup(target.Close)
	var tries sync.WaitGroup
	tries.Add(1)
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusTemporaryRedirect)
		tries.Done()
	}))
	t.Cleanup(redirect.Close)
	n, err := New(Options{Format: FormatCloudEvents, URL: func(context.Context) (string, error) { return redirect.URL, nil }, Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	err = n.deliver(context.Background(), testMessage())
	tries.Wait() // a second try would panic (negative WaitGroup counter)
	if err == nil || !strings.Contains(err.Error(), "redirect") {
		t.Fatalf("deliver = %v, want a redirect refused", err)
	}
	if got := elsewhere.got(); len(got) != 0 {
		t.Fatalf("the redirect was followed: %d requests elsewhere", len(got))
	}
}

// A message of many workloads with long names and reasons stays under every receiver's
// size limit (Teams: 28 KB; Slack: 40,000 characters), listing the rest as "and N more".
func TestMessageSizeCapped(t *testing.T) {
	var evs []Event
	for i := range 60 {
		ev := rolled("Deployment/" + strings.Repeat("w", 240) + string(rune('a'+i%26)) + string(rune('a'+i/26)))
		ev.Reason = strings.Repeat("configmap/app changed (digest 3f2a1c9e0b7d -> 77c0de12ab34; keys: mode) ", 40)
		evs = append(evs, ev)
	}
	n, err := New(Options{Format: FormatSlack, URL: URLFromFile("/nonexistent"), Queue: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		n.Notify(ev) // clips the reason
	}
	one := evs[0]
	one.Reason = strings.Repeat("x", 30000)
	n.Notify(one)
	evs = evs[:0]
	for range 60 {
		evs = append(evs, <-n.events)
	}
	one = <-n.events
	for _, name := range Formats {
		f, _ := formatter(name)
		if _, body, _ := render(f, toMessage([]Event{one}), "configstamp", "id"); len(body) > maxBody {
			t.Errorf("%s: one workload's body of %d bytes, over %d", name, len(body), maxBody)
		}
		m := toMessage(slices.Clone(evs))
		_, body, err := render(f, m, "configstamp", "id")
		if err != nil {
			t.Fatal(err)
		}
		if len(body) > maxBody {
			t.Errorf("%s: body of %d bytes, over %d", name, len(body), maxBody)
		}
		if !strings.Contains(string(body), "configstamp rolled 60 workloads") || !strings.Contains(string(body), "more") {
			t.Errorf("%s: the message does not count every workload: %.300s", name, body)
		}
	}
}

// A held report dropped on a full queue is not taken as sent: the next one goes out.
func TestHeldDroppedReportedAgain(t *testing.T) {
	n, err := New(Options{Format: FormatSlack, URL: URLFromFile("/nonexistent"), Queue: 1})
	if err != nil {
		t.Fatal(err)
	}
	a := Event{Kind: HeldPaused, Namespace: "ns", Workload: "Deployment/a", Change: "h1", Reason: "paused"}
	b := a
	b.Workload = "Deployment/b"
	n.Notify(a)
	n.Notify(b) // the queue is full: dropped
	<-n.events
	n.Notify(b)
	if len(n.events) != 1 {
		t.Fatal("a held report dropped on a full queue was then never sent")
	}
}

// A restamp's message says so: nothing was started.
func TestRestampedTitle(t *testing.T) {
	ev := rolled("CronJob/report")
	ev.Kind = Restamped
	m := toMessage([]Event{ev})
	want := "configstamp restamped 1 workload in namespace team-a for the next run after a change of configmap/app (nothing started)"
	if got := m.title(); got != want {
		t.Fatalf("title %q, want %q", got, want)
	}
	_, body, err := cloudEvent(m, "configstamp", "id")
	if err != nil || !strings.Contains(string(body), `"type":"io.configstamp.restamped"`) {
		t.Fatalf("%s %v", body, err)
	}
}

// A halted change's message names the source and the workload that failed, in each
// format; the same halt queued twice is sent once.
func TestHaltedMessage(t *testing.T) {
	ev := Event{Kind: Halted, Namespace: "team-a", Workload: "Deployment/a", Change: "configmap/app=77c0de12ab34", Sources: []string{"configmap/app"},
		Reason: "change configmap/app=77c0de12ab34 halted in wave 1 of 3: did not become available: ProgressDeadlineExceeded"}
	m := toMessage([]Event{ev})
	_, body, err := slack(m, "", "")
	want := "configstamp: a change rolling in waves halted in namespace team-a after a change of configmap/app: 1 workload failed; " +
		"the workloads not yet rolled keep their config\n• Deployment/a: " + ev.Reason
	var text map[string]string
	if err != nil || json.Unmarshal(body, &text) != nil || text["text"] != want {
		t.Fatalf("slack %s %v, want text %q", body, err, want)
	}
	if _, body, err = teams(m, "", ""); err != nil || !strings.Contains(string(body), `"- Deployment/a: change configmap/app=77c0de12ab34 halted`) {
		t.Fatalf("teams %s %v", body, err)
	}
	if _, body, err = cloudEvent(m, "configstamp", "id"); err != nil || !strings.Contains(string(body), `"type":"io.configstamp.halted"`) ||
		!strings.Contains(string(body), `"change":"configmap/app=77c0de12ab34"`) {
		t.Fatalf("cloudevents %s %v", body, err)
	}
	n, err := New(Options{Format: FormatSlack, URL: URLFromFile("/nonexistent")})
	if err != nil {
		t.Fatal(err)
	}
	n.Notify(ev)
	n.Notify(ev)
	if len(n.events) != 1 {
		t.Fatalf("%d halt reports queued, want 1", len(n.events))
	}
}
