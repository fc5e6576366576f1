// Package notify sends optional messages about what configstamp did: the rollouts it
// caused, the ones it held back, and stamps that bypassed its webhook. Messages are
// batched per source change (one message lists every workload one change rolled),
// rate-limited, retried a bounded number of times, and never block the watcher: its
// events go into a bounded queue and are dropped, counted, when it is full. A message
// carries names, digests and the names of keys, never a value.
package notify

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/time/rate"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// Kind is what happened to a workload.
type Kind string

// The kinds of events notified.
const (
	// Rolled: configstamp rolled the workload after a config change.
	Rolled Kind = "rolled"
	// Restamped: configstamp restamped a workload without pods of its own (a CronJob)
	// after a config change: its next run starts with it; nothing started now.
	Restamped Kind = "restamped"
	// HeldMissing: a change not rolled while required config is missing.
	HeldMissing Kind = "held.missing"
	// HeldPaused: a change not rolled while the workload is paused.
	HeldPaused Kind = "held.paused"
	// Bypassed: the stamp still bypassed the webhook after every retry.
	Bypassed Kind = "bypassed"
	// Halted: a change rolling in waves halted; the workload is one that failed its wave.
	Halted Kind = "halted"
)

// Event is one workload's part of a message.
type Event struct {
	Kind      Kind
	Namespace string
	// Workload is "Kind/name", e.g. "Deployment/api".
	Workload string
	// Change names what changed, the batch's key within its namespace: for a rollout the
	// changed sources at their new resourceVersions ("configmap/app@4711"; or digests,
	// "configmap/app=77c0de12ab34", where the version is not known), so that every
	// workload one change rolled shares it.
	Change string
	// Sources are the sources named in Change ("configmap/app").
	Sources []string
	// Reason is configstamp's text for it (names, digests, key names only).
	Reason string
	Time   time.Time
}

// Defaults of Options.
const (
	DefaultWindow      = 5 * time.Second
	DefaultQueue       = 1024
	DefaultMaxAttempts = 4
	DefaultBackoff     = time.Second
	DefaultTimeout     = 10 * time.Second
	// DefaultRate is messages per second (a token bucket of DefaultBurst).
	DefaultRate  = 1
	DefaultBurst = 5
	// maxWorkloads is how many workloads one message lists; more are counted.
	maxWorkloads = 50
	// windowCap bounds a batch's wait from its first event, in windows, so that a
	// fan-out that never ends still reports.
	windowCap = 6
	// maxReason bounds one workload's reason in a message, in bytes.
	maxReason = 1024
	// maxBody bounds a message's body, in bytes: Teams refuses one over 28 KB, Slack
	// cuts a text past 40,000 characters. Workloads past it are counted ("and N more").
	maxBody = 24 << 10
	// repeatAfter is how long a held or bypassed workload's same report is not sent
	// again (a held workload is checked on every event).
	repeatAfter = time.Hour
)

// Options configure a Notifier.
type Options struct {
	// URL returns the receiver's URL, read on every message (a rotated Secret or file is
	// followed).
	URL func(ctx context.Context) (string, error)
	// Format is FormatCloudEvents, FormatSlack or FormatTeams.
	Format string
	// Source is the CloudEvents source attribute (default "configstamp").
	Source string
	// Window is how long a batch waits after its latest event (default DefaultWindow).
	Window time.Duration
	// Queue bounds the events waiting (default DefaultQueue), and the messages waiting
	// to be sent (a tenth of it).
	Queue int
	// Rate and Burst are the token bucket of messages sent (defaults DefaultRate and
	// DefaultBurst).
	Rate  rate.Limit
	Burst int
	// MaxAttempts bounds the tries of one message (default DefaultMaxAttempts); Backoff
	// is the wait before the second, doubled each time (default DefaultBackoff).
	MaxAttempts int
	Backoff     time.Duration
	// Timeout bounds one request (default DefaultTimeout).
	Timeout time.Duration
	// Client sends the requests (default: a client with no cookie jar).
	Client *http.Client
}

// Notifier batches events into messages and sends them. Its methods are safe on a nil
// *Notifier (notifications off). It runs on the leader only (NeedLeaderElection).
type Notifier struct {
	o       Options
	events  chan Event
	out     chan message
	limiter *rate.Limiter
	mu      sync.Mutex
	// reported are the held and bypassed reports sent lately, by key.
	reported map[string]time.Time
}

// New makes a Notifier; add it to the manager to run it.
func New(o Options) (*Notifier, error) {
	if _, err := formatter(o.Format); err != nil {
		return nil, err
	}
	if o.URL == nil {
		return nil, fmt.Errorf("notifications: no URL")
	}
	if o.Source == "" {
		o.Source = "configstamp"
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	if o.Rate <= 0 {
		o.Rate = DefaultRate
	}
	if o.Burst <= 0 {
		o.Burst = DefaultBurst
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.Backoff <= 0 {
		o.Backoff = DefaultBackoff
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Client == nil {
		o.Client = &http.Client{CheckRedirect: noRedirects}
	}
	return &Notifier{o: o, events: make(chan Event, o.Queue), out: make(chan message, max(o.Queue/10, 1)),
		limiter: rate.NewLimiter(o.Rate, o.Burst), reported: map[string]time.Time{}}, nil
}

// Notify queues ev without blocking: when the queue is full it is dropped and counted.
func (n *Notifier) Notify(ev Event) {
	if n == nil {
		return
	}
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	ev.Reason = clip(ev.Reason, maxReason)
	if ev.Kind != Rolled && !n.firstReport(ev) {
		return
	}
	select {
	case n.events <- ev:
	default:
		notifications.WithLabelValues("dropped").Inc()
		if ev.Kind != Rolled {
			// Not sent: the next check may report it again.
			n.mu.Lock()
			delete(n.reported, reportKey(ev))
			n.mu.Unlock()
		}
	}
}

// reportKey names one held or bypassed report.
func reportKey(ev Event) string {
	return string(ev.Kind) + "\x00" + ev.Namespace + "\x00" + ev.Workload + "\x00" + ev.Change
}

// noRedirects makes the client answer with a redirect rather than follow it: the
// receiver's URL is the admin's choice, where it points to next is not (a 307 would
// send the message to any address the receiver names, inside the cluster too).
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// clip cuts s to at most n bytes, on a character boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	s = s[:n-len(mark)]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + mark
}

// firstReport reports whether ev's held or bypassed report was not sent within
// repeatAfter, and remembers it.
func (n *Notifier) firstReport(ev Event) bool {
	key := reportKey(ev)
	now := time.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	if t, ok := n.reported[key]; ok && now.Sub(t) < repeatAfter {
		return false
	}
	if len(n.reported) >= DefaultQueue {
		for k, t := range n.reported {
			if now.Sub(t) >= repeatAfter {
				delete(n.reported, k)
			}
		}
		if len(n.reported) >= DefaultQueue {
			clear(n.reported)
		}
	}
	n.reported[key] = now
	return true
}

// NeedLeaderElection: only the leader (the watcher) notifies.
func (n *Notifier) NeedLeaderElection() bool { return true }

// batch is the events of one change, waiting for its window to close.
type batch struct {
	first, last time.Time
	events      []Event
}

// message is one batch to send.
type message struct {
	kind      Kind
	namespace string
	change    string
	sources   []string
	events    []Event
	more      int
	time      time.Time
}

// Start collects events into batches and sends each when its window closes, until ctx
// ends.
func (n *Notifier) Start(ctx context.Context) error {
	go n.send(ctx)
	batches := map[string]*batch{}
	tick := time.NewTicker(max(min(n.o.Window/4, time.Second), 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-n.events:
			key := string(ev.Kind) + "\x00" + ev.Namespace + "\x00" + ev.Change
			b := batches[key]
			if b == nil {
				b = &batch{first: time.Now()}
				batches[key] = b
			}
			b.last = time.Now()
			if !slices.ContainsFunc(b.events, func(e Event) bool { return e.Workload == ev.Workload }) {
				b.events = append(b.events, ev)
			}
		case now := <-tick.C:
			for key, b := range batches {
				if now.Sub(b.last) < n.o.Window && now.Sub(b.first) < windowCap*n.o.Window {
					continue
				}
				delete(batches, key)
				n.queue(toMessage(b.events))
			}
		}
	}
}

// toMessage makes the message of one batch's events.
func toMessage(evs []Event) message {
	slices.SortFunc(evs, func(a, b Event) int {
		if a.Workload < b.Workload {
			return -1
		}
		if a.Workload > b.Workload {
			return 1
		}
		return 0
	})
	first := evs[0]
	m := message{kind: first.Kind, namespace: first.Namespace, change: first.Change, sources: first.Sources, events: evs, time: first.Time}
	for _, e := range evs {
		if e.Time.After(m.time) {
			m.time = e.Time
		}
	}
	if len(evs) > maxWorkloads {
		m.events, m.more = evs[:maxWorkloads], len(evs)-maxWorkloads
	}
	return m
}

// queue hands m to the sender, dropping it (counted) when the sender is that far behind.
func (n *Notifier) queue(m message) {
	select {
	case n.out <- m:
	default:
		notifications.WithLabelValues("dropped").Inc()
	}
}

// send sends the queued messages, within the rate limit, until ctx ends.
func (n *Notifier) send(ctx context.Context) {
	log := logf.FromContext(ctx).WithName("notify")
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-n.out:
			if err := n.limiter.Wait(ctx); err != nil {
				return
			}
			if err := n.deliver(ctx, m); err != nil {
				notifications.WithLabelValues("failed").Inc()
				log.Error(err, "Could not send a notification", "kind", m.kind, "namespace", m.namespace, "workloads", len(m.events)+m.more)
				continue
			}
			notifications.WithLabelValues("sent").Inc()
			log.V(1).Info("Sent a notification", "kind", m.kind, "namespace", m.namespace, "workloads", len(m.events)+m.more)
		}
	}
}
