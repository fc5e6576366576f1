package webhook

import (
	"context"
	"errors"
	"net/http"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/internal/workload"
)

// DefaultMaxRequestBytes caps an admission request's body, read or not. The API server
// accepts request bodies of at most 3 MiB and etcd stores objects of at most 1.5 MiB; a
// review carries the object and, on UPDATE, the stored one: 4 MiB holds both of an
// object etcd can store, with room for JSON and the review around them. controller-
// runtime's own cap is 7 MiB, which ten forged reviews at once turn into 150 MiB of heap.
const DefaultMaxRequestBytes = 4 << 20

// DefaultMaxInFlight caps the admission requests read or handled at once, per replica.
// A review takes a few milliseconds (its reads included), so 8 serve hundreds a second;
// at the body cap one takes about 25 MiB of heap while decoded, so 8 stay within the
// chart's 256 Mi memory limit.
const DefaultMaxInFlight = 8

// The time budget of one admission, within the registration's timeoutSeconds
// (DefaultTimeout, 5 s), from the moment its headers are read: the slot (at most
// slotWait, 1 s) and the body together by bodyDeadline (2 s, so a body has at least 1 s
// to arrive once in a slot: a 4 MiB body at 32 Mbit/s; the API server sends it with the
// headers), then the reads (DefaultReadTimeout, 3 s): 5 s. The answer must be written by
// writeDeadline (bodyDeadline, the read timeout and a second: 6 s by default), past which
// the API server has given up; a longer --read-timeout (the chart derives it from a
// longer timeoutSeconds) lengthens it. A body
// that has not arrived by then frees its slot: a connection sending its body slowly
// cannot hold a slot for long, so eight of them cannot make every review 429.
const (
	slotWait      = time.Second
	bodyDeadline  = 2 * time.Second
	writeDeadline = bodyDeadline + DefaultReadTimeout + time.Second
)

// guard serves one admission webhook within the bounds of the server: a body over
// maxBytes is answered 413 unread, and at most cap(slots) requests are read or handled
// at once; one that finds no slot within slotWait is answered 429 unread. The API
// server admits both unstamped (failurePolicy Ignore, an audit annotation says it failed
// open); no log line, so a flood cannot fill the log: the metrics count them.
type guard struct {
	wh       *admission.Webhook
	maxBytes int64
	slots    chan struct{}
	// share, when set, caps the requests of this guard's paths within slots (it is
	// taken first): Jobs', so a burst of them leaves the other kinds their slots.
	share chan struct{}
	// write is the write deadline (0: writeDeadline).
	write time.Duration
}

// handledKey marks a request's context; the handler sets the flag it points to.
type handledKey struct{}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if r.ContentLength > g.maxBytes {
		bodiesTooLarge.Inc()
		observe(resultRejected, start)
		http.Error(w, "admission review larger than configstamp's --webhook-max-request-bytes", http.StatusRequestEntityTooLarge)
		return
	}
	if !g.acquire(r.Context()) {
		observe(resultBusy, start)
		http.Error(w, "configstamp is busy (--webhook-max-in-flight)", http.StatusTooManyRequests)
		return
	}
	defer g.release()
	if r.ContentLength < 0 {
		// A body of unknown length is cut at the cap: controller-runtime then answers
		// it as unreadable (the API server always sends a Content-Length).
		r.Body = http.MaxBytesReader(w, r.Body, g.maxBytes)
	}
	if err := bound(w, start, g.writeDeadline()); err != nil {
		observe(resultRejected, start)
		http.Error(w, "configstamp cannot bound the request's time", http.StatusInternalServerError)
		return
	}
	handled := false
	g.wh.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), handledKey{}, &handled)))
	if !handled {
		// Answered by controller-runtime without the handler: a body that is no
		// AdmissionReview, of another content type, or empty; it logs each itself.
		observe(resultRejected, start)
	}
}

// bound sets the connection's deadlines for the request started at start: its body must
// have arrived by start+bodyDeadline (controller-runtime then answers it as unreadable),
// its answer be written by start+write. net/http lifts the read deadline once
// the body is read whole (a deadline passing while the handler runs would cancel the
// request's context, and with it the handler's reads), and the write deadline once the
// answer is written: a kept-alive connection's next request starts with neither.
func bound(w http.ResponseWriter, start time.Time, write time.Duration) error {
	rc := http.NewResponseController(w)
	err := errors.Join(rc.SetReadDeadline(start.Add(bodyDeadline)), rc.SetWriteDeadline(start.Add(write)))
	if errors.Is(err, http.ErrNotSupported) {
		// A ResponseWriter of no connection (httptest's recorder): nothing to bound.
		return nil
	}
	return err
}

// writeDeadline is the time from a request's headers to its answer written: room for
// the body and the reads of one admission under the configured read timeout.
func (g *guard) writeDeadline() time.Duration {
	if g.write > 0 {
		return g.write
	}
	return writeDeadline
}

func (g *guard) acquire(ctx context.Context) bool {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	take := func(c chan struct{}) bool {
		select {
		case c <- struct{}{}:
			return true
		default:
		}
		if timer == nil {
			timer = time.NewTimer(slotWait)
		}
		select {
		case c <- struct{}{}:
			return true
		case <-timer.C:
		case <-ctx.Done():
		}
		return false
	}
	if g.share != nil && !take(g.share) {
		return false
	}
	if !take(g.slots) {
		if g.share != nil {
			<-g.share
		}
		return false
	}
	inFlight.Inc()
	return true
}

func (g *guard) release() {
	inFlight.Dec()
	<-g.slots
	if g.share != nil {
		<-g.share
	}
}

// kindGuards are the guards of each kind's path: g's, but a CreateOnly kind's (Jobs,
// which other controllers create in bursts: KEDA ScaledJobs, many CronJobs at the same
// minute) take at most half of g's slots, so such a burst cannot answer 429 to every
// Deployment's admission (left unstamped, fail open).
func kindGuards(g *guard, kinds []*workload.Kind) map[string]*guard {
	createOnly := *g
	createOnly.share = make(chan struct{}, max(1, cap(g.slots)/2))
	out := map[string]*guard{}
	for _, k := range kinds {
		out[k.Path()] = g
		if k.CreateOnly() {
			out[k.Path()] = &createOnly
		}
	}
	return out
}
