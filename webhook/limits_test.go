package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/stamp"
)

// Log messages of the annotation size limit.
const (
	logUnstamped     = "Left unstamped: the stamp would exceed the pod template's annotation size limit"
	logNoRecord      = "Stamped without a record: it would exceed the annotation size limit"
	logRecordLeftOut = "Left the record out: it would exceed the annotation size limit"
)

// full is extra plus a "pad" annotation that brings them to room bytes under the API
// server's annotation size limit (keys and values, counted as it counts them).
func full(extra map[string]string, room int) map[string]string {
	size := len("pad")
	out := map[string]string{}
	for k, v := range extra {
		size += len(k) + len(v)
		out[k] = v
	}
	out["pad"] = strings.Repeat("a", stamp.AnnotationSizeLimit-size-room)
	return out
}

// counterValue reads one counter (prometheus/testutil would add a dependency).
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func annotationSize(m map[string]string) int {
	n := 0
	for k, v := range m {
		n += len(k) + len(v)
	}
	return n
}

// outcome is one admission: its response, the result it was counted as, the Deployment
// as the API server would store it (the patch applied), and configstamp's log messages.
type outcome struct {
	resp   admission.Response
	result string
	stored *appsv1.Deployment
	logs   []string
}

// admit runs one admission of obj (old: nil for a CREATE) through s.
func admit(t *testing.T, s *Stamper, req admission.Request, obj *appsv1.Deployment) outcome {
	t.Helper()
	var mu sync.Mutex
	var logs []string
	ctx := logr.NewContext(context.Background(), funcr.New(func(_, args string) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, args)
	}, funcr.Options{}))
	results := []string{resultStamped, resultUnchanged, resultSkipped, resultHeld, resultReadError, resultTooLarge, resultRejected, resultPanic}
	before := map[string]float64{}
	for _, r := range results {
		before[r] = counterValue(admissionRequests.WithLabelValues(r))
	}
	resp := s.Handle(ctx, req)
	out := outcome{resp: resp, logs: logs}
	for _, r := range results {
		if d := counterValue(admissionRequests.WithLabelValues(r)) - before[r]; d != 0 {
			if out.result != "" || d != 1 {
				t.Fatalf("one admission counted %v more as %s (and as %q)", d, r, out.result)
			}
			out.result = r
		}
	}
	if !resp.Allowed {
		t.Fatalf("refused: %+v", resp.Result)
	}
	doc, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Patches) > 0 {
		patch, err := json.Marshal(resp.Patches)
		if err != nil {
			t.Fatal(err)
		}
		if doc, err = applyJSONPatch(doc, patch); err != nil {
			t.Fatalf("patch %s does not apply: %v", patch, err)
		}
	}
	out.stored = &appsv1.Deployment{}
	if err := json.Unmarshal(doc, out.stored); err != nil {
		t.Fatal(err)
	}
	// Whatever configstamp did, the API server must be able to store the result.
	if n := annotationSize(out.stored.Annotations); n > stamp.AnnotationSizeLimit {
		t.Fatalf("metadata annotations of %d bytes after the patch: past the limit", n)
	}
	if n := annotationSize(out.stored.Spec.Template.Annotations); n > stamp.AnnotationSizeLimit {
		t.Fatalf("pod template annotations of %d bytes after the patch: past the limit", n)
	}
	return out
}

func (o outcome) logged(msg string) bool {
	for _, l := range o.logs {
		if strings.Contains(l, fmt.Sprintf("%q", msg)) {
			return true
		}
	}
	return false
}

func (o outcome) warned(s string) bool {
	for _, w := range o.resp.Warnings {
		if strings.Contains(w, s) {
			return true
		}
	}
	return false
}

func (o outcome) ops() string {
	var got []string
	for _, p := range o.resp.Patches {
		got = append(got, p.Operation+" "+p.Path)
	}
	return strings.Join(got, ",")
}

func TestLimitCreateWithAFullTemplateIsLeftUnstamped(t *testing.T) {
	d := dep(full(nil, 20), "img", "cfg")
	o := admit(t, stamper(t, cm("cfg", "1")), request(t, admissionv1.Create, d, nil), d)
	if o.result != resultTooLarge || len(o.resp.Patches) != 0 {
		t.Fatalf("result %q, patches %q: want too_large and no patch", o.result, o.ops())
	}
	if !o.warned("not stamped") || !o.logged(logUnstamped) {
		t.Fatalf("warnings %q, logs %q", o.resp.Warnings, o.logs)
	}
	// The same with room for the stamp: stamped (the test's arithmetic is right).
	d = dep(full(nil, 200), "img", "cfg")
	if o := admit(t, stamper(t, cm("cfg", "1")), request(t, admissionv1.Create, d, nil), d); o.result != resultStamped || hashOfStored(o) != expected(t, "1").Hash {
		t.Fatalf("with room: result %q, patches %q", o.result, o.ops())
	}
}

func hashOfStored(o outcome) string { return o.stored.Spec.Template.Annotations[stamp.HashAnnotation] }

// A template change that leaves no room for the new stamp (it consumes one more
// ConfigMap, so its sources annotation grows): the old stamp, sources, restart time and
// record describe other pods than the new template's, so they go.
func TestLimitChangedTemplateDropsTheOldStamp(t *testing.T) {
	old := expected(t, "0")
	ann := stamped(old)
	ann[stamp.RestartedAnnotation] = "2026-11-30T12:00:00Z"
	ann = full(ann, 0)
	prev := withRecord(dep(ann, "img", "cfg"), "img", old.Hash)
	update := withRecord(dep(ann, "img", "cfg", "cfg2"), "img", old.Hash)
	o := admit(t, stamper(t, cm("cfg", "1"), cm("cfg2", "2")), request(t, admissionv1.Update, update, prev), update)
	want := "remove /spec/template/metadata/annotations/configstamp.io~1config-hash," +
		"remove /spec/template/metadata/annotations/configstamp.io~1restarted-at," +
		"remove /spec/template/metadata/annotations/configstamp.io~1sources," +
		"remove /metadata/annotations/configstamp.io~1observed"
	if o.result != resultTooLarge || o.ops() != want {
		t.Fatalf("result %q, patches %q: want too_large and %q", o.result, o.ops(), want)
	}
	if !o.warned("not stamped") || !o.logged(logUnstamped) {
		t.Fatalf("warnings %q, logs %q", o.resp.Warnings, o.logs)
	}
}

// A nudge that needs a restart annotation on a template with room for the stamp (it
// carries it already) but not for the restart time: admitted as it is, too_large, the
// stored stamp and record kept; never a template the API server would refuse.
func TestLimitNudgeWhoseRestartDoesNotFit(t *testing.T) {
	cur := expected(t, "1")
	pods := expected(t, "2")
	for _, c := range []struct {
		room   int
		result string
		ops    string
	}{
		{30, resultTooLarge, "remove /metadata/annotations/configstamp.io~1nudge"},
		{200, resultStamped, "remove /metadata/annotations/configstamp.io~1nudge,add /spec/template/metadata/annotations/configstamp.io~1restarted-at," +
			"add /metadata/annotations/configstamp.io~1observed,add /metadata/annotations/configstamp.io~1keys,add /metadata/annotations/kubernetes.io~1change-cause"},
	} {
		t.Run(fmt.Sprintf("room %d", c.room), func(t *testing.T) {
			stored := withRecord(dep(full(stamped(cur), c.room), "img", "cfg"), "img", pods.Hash)
			nudge := stored.DeepCopy()
			nudge.Annotations[stamp.NudgeAnnotation] = testNudge
			o := admit(t, stamper(t, cm("cfg", "1")), request(t, admissionv1.Update, nudge, stored), nudge)
			if o.result != c.result || o.ops() != c.ops {
				t.Fatalf("result %q, patches %q; want %q, %q", o.result, o.ops(), c.result, c.ops)
			}
			if c.result == resultTooLarge {
				if !o.warned("not stamped") || !o.logged(logUnstamped) {
					t.Fatalf("warnings %q, logs %q", o.resp.Warnings, o.logs)
				}
				if hashOfStored(o) != cur.Hash || o.stored.Annotations[stamp.ObservedAnnotation] != stored.Annotations[stamp.ObservedAnnotation] {
					t.Fatalf("the stored stamp or record changed: %v", o.stored.Annotations)
				}
			}
		})
	}
}

// keep() (an update that keeps the template, a read error, a hold) puts back what
// configstamp stored only if it fits: an update that drops the record and fills the
// metadata, or drops the stamp and fills the template, is admitted without them.
func TestLimitKeepLeavesOutWhatDoesNotFit(t *testing.T) {
	cur := expected(t, "1")
	for _, c := range []struct {
		name   string
		room   int
		reader client.Reader
		result string
		ops    string
		log    string
		// update is the incoming object, given the stored one.
		update func(stored *appsv1.Deployment) *appsv1.Deployment
	}{
		{"record dropped, metadata full", 20, nil, resultSkipped, "", logRecordLeftOut, func(stored *appsv1.Deployment) *appsv1.Deployment {
			d := stored.DeepCopy()
			d.Annotations = full(nil, 20)
			return d
		}},
		{"record dropped, metadata with room", 1000, nil, resultSkipped, "add /metadata/annotations/configstamp.io~1observed", "", func(stored *appsv1.Deployment) *appsv1.Deployment {
			d := stored.DeepCopy()
			d.Annotations = full(nil, 1000)
			return d
		}},
		{"read error, stamp dropped, template full", 10, failingReader(), resultReadError, "", "", func(stored *appsv1.Deployment) *appsv1.Deployment {
			d := stored.DeepCopy()
			d.Spec.Template.Annotations = full(nil, 10)
			return d
		}},
		{"read error, stamp dropped, template with room", 1000, failingReader(), resultReadError,
			"add /spec/template/metadata/annotations/configstamp.io~1config-hash,add /spec/template/metadata/annotations/configstamp.io~1sources", "",
			func(stored *appsv1.Deployment) *appsv1.Deployment {
				d := stored.DeepCopy()
				d.Spec.Template.Annotations = full(nil, 1000)
				return d
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			stored := withRecord(dep(stamped(cur), "img", "cfg"), "img", cur.Hash)
			update := c.update(stored)
			s := stamper(t, cm("cfg", "1"))
			if c.reader != nil {
				s = &Stamper{Reader: c.reader, Key: testKey}
			}
			o := admit(t, s, request(t, admissionv1.Update, update, stored), update)
			if o.result != c.result || o.ops() != c.ops {
				t.Fatalf("result %q, patches %q; want %q, %q", o.result, o.ops(), c.result, c.ops)
			}
			if c.log != "" && !o.logged(c.log) {
				t.Fatalf("logs %q, want %q", o.logs, c.log)
			}
		})
	}
}

// A stamp that fits with a record that does not: stamped, without a record, with a
// warning, a log line and configstamp_admission_records_omitted_total.
func TestLimitRecordDoesNotFit(t *testing.T) {
	d := dep(nil, "img", "cfg")
	d.Annotations = full(nil, 20)
	omitted := counterValue(recordsOmitted)
	o := admit(t, stamper(t, cm("cfg", "1")), request(t, admissionv1.Create, d, nil), d)
	if o.result != resultStamped || o.ops() != "add /spec/template/metadata/annotations" || hashOfStored(o) != expected(t, "1").Hash {
		t.Fatalf("result %q, patches %q: want stamped, no record", o.result, o.ops())
	}
	if _, ok := o.stored.Annotations[stamp.ObservedAnnotation]; ok {
		t.Fatal("a record past the limit")
	}
	if !o.warned("stamped without its record") || !o.logged(logNoRecord) {
		t.Fatalf("warnings %q, logs %q", o.resp.Warnings, o.logs)
	}
	if got := counterValue(recordsOmitted) - omitted; got != 1 {
		t.Fatalf("records_omitted rose by %v, want 1", got)
	}
}

// A workload stamped without a record (none fits) is treated as recorded: someone else's
// update that keeps its template does not roll it to changed config (the watcher does,
// at its pace), where without the rule it would be restamped at once.
func TestLimitNoRoomForARecordKeepsTheStamp(t *testing.T) {
	old := dep(stamped(expected(t, "1")), "img", "cfg")
	old.Annotations = full(nil, 20)
	d := old.DeepCopy()
	d.Labels = map[string]string{"team": "x"} // someone else's update, template kept
	o := admit(t, stamper(t, cm("cfg", "2")), request(t, admissionv1.Update, d, old), d)
	if o.result != resultSkipped || hashOfStored(o) != expected(t, "1").Hash {
		t.Fatalf("result %q, stamp %q: want skipped, the stored stamp kept", o.result, hashOfStored(o))
	}
	// With room for a record (an old stamp that never had one), the update is stamped.
	old.Annotations = nil
	d = old.DeepCopy()
	d.Labels = map[string]string{"team": "x"}
	if o := admit(t, stamper(t, cm("cfg", "2")), request(t, admissionv1.Update, d, old), d); hashOfStored(o) != expected(t, "2").Hash {
		t.Fatalf("with room: result %q, stamp %q, want the new stamp", o.result, hashOfStored(o))
	}
}

// A panic in a read goroutine is a read error (admitted with a warning, the process
// lives on); a panic in the handler itself is counted as result="panic" and the request
// admitted as it came: an allowed=false answer would refuse the write whatever the
// failurePolicy.
func TestLimitPanics(t *testing.T) {
	panicking := readerFailingWith(func() error { panic("reader bug") })
	d := dep(nil, "img", "cfg")
	o := admit(t, &Stamper{Reader: panicking, Key: testKey}, request(t, admissionv1.Create, d, nil), d)
	if o.result != resultReadError || !o.warned("panic: reader bug") {
		t.Fatalf("a panicking read: result %q, warnings %q", o.result, o.resp.Warnings)
	}

	s := stamper(t, cm("cfg", "1"))
	s.Key = func() []byte { panic("handler bug") } // called in the handler's goroutine
	before := counterValue(admissionRequests.WithLabelValues(resultPanic))
	resp := s.Handle(context.Background(), request(t, admissionv1.Create, d, nil))
	if !resp.Allowed || len(resp.Patches) > 0 || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "internal error") {
		t.Fatalf("the answer to a panic: %+v, want allowed, unpatched, one warning", resp)
	}
	if got := counterValue(admissionRequests.WithLabelValues(resultPanic)) - before; got != 1 {
		t.Fatalf("panic counted %v times, want 1", got)
	}
	wh := (&admission.Webhook{Handler: s}).WithRecoverPanic(true)
	resp = wh.Handle(context.Background(), request(t, admissionv1.Create, d, nil))
	if !resp.Allowed {
		t.Fatalf("the webhook's answer to a panic: %+v, want allowed", resp)
	}
	if got := counterValue(admissionRequests.WithLabelValues(resultPanic)) - before; got != 2 {
		t.Fatalf("panics counted %v times, want 2", got)
	}
}
