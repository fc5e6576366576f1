package watcher

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/internal/notify"
	"github.com/configstamp/configstamp/internal/waves"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// nudgePatch is the watcher's "empty" update: it only sets the nudge marker, which names
// the key the watcher computed under (its fingerprint) and which the webhook strips
// again while it recomputes the stamp. If the stamp is unchanged the API server stores
// nothing; if the webhook is down, the marker lands in the workload's metadata, which
// rolls nothing. A nudge in waves also sets rolled, the workload's
// waves.RolledAnnotation ("": none), in the same write.
func nudgePatch(key, rolled string) client.Patch {
	annotations := map[string]string{stamp.NudgeAnnotation: stamp.NudgeFor(key)}
	if rolled != "" {
		annotations[waves.RolledAnnotation] = rolled
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	return client.RawPatch(types.MergePatchType, b)
}

// rolledRecord is the waves.RolledAnnotation value that records entries ("": none).
// None where it would not fit the workload's annotations with the webhook's headroom:
// the API server would refuse the write (a nudge refused for ever: the workload would
// never roll); unrecorded, it counts as done once rolled, its health not judged.
func rolledRecord(annotations map[string]string, entries []waves.RolledEntry, keep func(src string) bool) string {
	v := waves.RolledValue(annotations[waves.RolledAnnotation], entries, keep)
	if !stamp.AnnotationsFitWithin(annotations, map[string]string{waves.RolledAnnotation: v}, stamp.CauseHeadroom) {
		return ""
	}
	return v
}

// maxBypassRetries is how many times a stamp that bypassed the webhook is retried
// (with backoff, about two and a half minutes in all at the default backoff) before it
// is reported and left alone until the next event.
const maxBypassRetries = 10

// unreadRetry is how often a nudge is retried once maxBypassRetries nudges found the
// webhook unable to read config: slowly, so as not to add to an API server that is
// failing reads, but never given up.
const unreadRetry = 5 * time.Minute

// nudged is a nudge's answer, the workload as the patch returned it, and what it is
// judged against.
type nudged struct {
	obj  client.Object
	tmpl *corev1.PodTemplateSpec
	got  string // the stamp after the nudge
	// want is the config the check read; basis what the pods were judged to run.
	want  stamp.Stamp
	basis string
	// The template's stamp, sources and restart time before the nudge.
	storedHash, storedSources, restarted string
	// restart: the check asked for a restart (the stamp named the config already).
	restart bool
	warned  *warnings
}

// restartedNow reports whether the nudge set a new restart time.
func (n *nudged) restartedNow() bool {
	return n.tmpl.Annotations[stamp.RestartedAnnotation] != n.restarted
}

// rollout is the rollout the nudge caused.
func (n *nudged) rollout(restart bool) stamp.Rollout {
	return stamp.Rollout{StoredHash: n.storedHash, StoredSources: n.storedSources, Hash: n.got,
		Sources: n.tmpl.Annotations[stamp.SourcesAnnotation], Ran: n.basis, Restart: restart}
}

// nudge rolls the workload through the webhook and verifies the stamp it got.
func (r *workloadReconciler) nudge(ctx context.Context, obj client.Object, want stamp.Stamp, basis, before string, restart bool) (reconcile.Result, error) {
	key := client.ObjectKeyFromObject(obj)
	n := &nudged{obj: obj, want: want, basis: basis, storedSources: before, restart: restart}
	if tmpl := r.kind.Template(obj); tmpl != nil {
		n.restarted = tmpl.Annotations[stamp.RestartedAnnotation]
		n.storedHash = tmpl.Annotations[stamp.HashAnnotation]
	}
	rolled := ""
	if entries := waveEntries(ctx); len(entries) > 0 {
		var refs []stamp.Source
		if tmpl := r.kind.Template(obj); tmpl != nil {
			refs = stamp.Consumed(obj.GetAnnotations(), &tmpl.Spec, r.sources)
		}
		rolled = rolledRecord(obj.GetAnnotations(), entries, consumes(refs))
	}
	pctx, warned := collectWarnings(ctx)
	answer, err := r.patchAnswer(pctx, key, nudgePatch(want.Key, rolled))
	if err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		checks.WithLabelValues("error").Inc()
		return reconcile.Result{}, fmt.Errorf("nudge %s %s: %w", r.kind, key, err)
	}
	nudges.Inc()
	n.obj = answer
	if n.tmpl = r.kind.Template(n.obj); n.tmpl == nil { // it dropped its template meanwhile (a Rollout given a workloadRef)
		return reconcile.Result{}, nil
	}
	n.got, n.warned = n.tmpl.Annotations[stamp.HashAnnotation], warned
	return r.answered(ctx, n)
}

// answered tells how the webhook answered a nudge: it was not called (the marker it
// strips is still there), it rolled (a new stamp or restart time, whatever config it
// read), or it kept what is stored.
func (r *workloadReconciler) answered(ctx context.Context, n *nudged) (reconcile.Result, error) {
	rolled := n.got != n.storedHash || n.restartedNow()
	if n.warned.has(stamp.WarningScopeUnknown) {
		// The replica that answered cannot place the namespace yet (its cache lags the
		// leader's): not a bypass; retried like unread config.
		return r.unread(ctx, n.obj, n.got)
	}
	if n.warned.has(stamp.WarningOtherKey) {
		// The replica that answered holds another key than this check computed under:
		// one of the two is stale. Nothing rolled; the watcher reads its own again and
		// retries.
		if r.freshKey != nil {
			// The replica's key was in use by its answer: read ours again after it.
			r.freshKey(ctx, time.Now())
		}
		return r.keyMismatch(ctx, n.obj, "the webhook replica that answered its nudge holds another hash key than the watcher's "+n.want.Key)
	}
	if _, marked := n.obj.GetAnnotations()[stamp.NudgeAnnotation]; marked {
		// Not called, even if the template carries the wanted stamp already.
		return reconcile.Result{}, r.bypassed(ctx, n.obj, n.got, n.want.Hash, "the configstamp webhook was not called (failurePolicy Ignore)")
	}
	switch {
	case n.got != n.want.Hash && rolled:
		// Onto config that moved on since this check read it: a rollout all the same; a
		// later change brings its own event.
		r.reportRolled(ctx, n.obj, n.tmpl, n.rollout(n.got == n.storedHash))
	case n.got != n.want.Hash, n.restart && !n.restartedNow():
		// A stamp other than the wanted one, or, where the template carried the wanted
		// stamp already, no restart time.
		return r.kept(ctx, n)
	case !rolled:
		// Nothing changed and nothing was to (a stamp dropped that was never there). A
		// cache that showed an older template than the live one is not caught here: its
		// nudge is reported as a rollout.
		r.state.resetBypasses(client.ObjectKeyFromObject(n.obj))
		checks.WithLabelValues("current").Inc()
	default:
		// Ran is the basis (the certain record's hash, else the stored stamp's): it
		// counts only where it differs from the stamp, as a record's does.
		r.reportRolled(ctx, n.obj, n.tmpl, n.rollout(n.restart))
	}
	return reconcile.Result{}, nil
}

// kept tells why the webhook kept what is stored, from a fresh read of the config:
// required config went missing (the next check holds it), the config changed back to
// what the pods run, or, where the kept stamp is not the wanted one, the config is what
// it names or its stamp grew past the size limit; else the webhook did not stamp it.
func (r *workloadReconciler) kept(ctx context.Context, n *nudged) (reconcile.Result, error) {
	stale := n.got != n.want.Hash
	refs := stamp.Consumed(n.obj.GetAnnotations(), &n.tmpl.Spec, r.sources)
	again, err := r.expected(ctx, n.obj, refs)
	if err != nil {
		return r.notStamped(ctx, n)
	}
	if len(again.Unmet()) > 0 || stale && again.Hash == n.got {
		checks.WithLabelValues("current").Inc()
		return reconcile.Result{}, nil
	}
	if r.changedBack(ctx, n.obj, n.tmpl, refs, again.Hash) {
		return reconcile.Result{}, nil
	}
	if stale && !stamp.AnnotationsFit(n.tmpl.Annotations, stamp.TemplateAnnotations(again.Hash, again.SourcesAnnotation(), "")) {
		return reconcile.Result{}, r.tooLarge(ctx, n.obj, "pod template", again.Hash)
	}
	return r.notStamped(ctx, n)
}

// notStamped handles a nudge the webhook answered without a rollout, for a reason only
// it can tell: its warning says it could not read config, or, with no word why,
// something else took the marker off (another mutating webhook), or the webhook does
// not take the watcher's nudges for its own (its --self is another identity).
func (r *workloadReconciler) notStamped(ctx context.Context, n *nudged) (reconcile.Result, error) {
	if n.warned.has(stamp.WarningUnreadConfig) {
		return r.unread(ctx, n.obj, n.got)
	}
	return reconcile.Result{}, r.bypassed(ctx, n.obj, n.got, n.want.Hash,
		"the nudge's marker was removed but the configstamp webhook did not stamp it (another mutating webhook may remove configstamp's annotations, or the webhook does not know the watcher's identity)")
}

// unread handles a nudge the webhook kept as stored because it could not read config
// (its warning says so). That is no bypass: the change stays owed, retried with backoff
// maxBypassRetries times, then every unreadRetry (with one ConfigUnreadable Event),
// until a nudge rolls it or an event starts over.
func (r *workloadReconciler) unread(ctx context.Context, obj client.Object, got string) (reconcile.Result, error) {
	key := client.ObjectKeyFromObject(obj)
	n := r.state.countUnread(key)
	checks.WithLabelValues("unread").Inc()
	return owedRetry(ctx, n, owedLines{
		retrying: "The webhook kept the stored stamp (it could not read config); retrying",
		later:    "The webhook still cannot read config; retrying later",
		err:      fmt.Errorf("%s %s: the webhook kept the stored stamp %q: it could not read config; retrying", r.kind, key, stamp.ShortHash(got)),
		kv:       []any{"storedHash", got},
	}, func() {
		r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonConfigUnreadable, "Nudge",
			"Not rolled after %d nudges: the configstamp webhook could not read this %s's config (its log says why: \"could not read config\"); retrying about every %s",
			n, r.kind, unreadRetry)
	})
}

// owedLines are what owedRetry logs and returns for one kind of owed change.
type owedLines struct {
	retrying, later string
	err             error
	kv              []any
	// leave, when set, leaves the workload alone once the retries ran out (it marks it
	// so), until its next event or the re-check's next pass, instead of retrying it
	// every unreadRetry.
	leave func()
}

// owedRetry schedules the n-th retry of a change owed but held up (the webhook cannot
// read config; the hash keys disagree; the check's own reads time out): the first
// maxBypassRetries with backoff (an error), then, after report once, about every
// unreadRetry, spread out: many workloads may be waiting on one failing API server; or,
// with l.leave, not until an event or the re-check queues it again.
func owedRetry(ctx context.Context, n int, l owedLines, report func()) (reconcile.Result, error) {
	log := logf.FromContext(ctx)
	if n <= maxBypassRetries {
		log.Info(l.retrying, append(l.kv, "attempt", n)...)
		return reconcile.Result{}, l.err
	}
	if n == maxBypassRetries+1 {
		report()
	}
	if l.leave != nil {
		log.Info(l.later, append(l.kv, "attempt", n)...)
		l.leave()
		return reconcile.Result{}, nil
	}
	after := unreadRetry + rand.N(unreadRetry/5)
	log.Info(l.later, append(l.kv, "attempt", n, "after", after.String())...)
	return reconcile.Result{RequeueAfter: after}, nil
}

// readTimedOut handles a check whose own reads of config ran past --read-timeout (more
// sources, missing ones included, than the watcher's client budget reads in time, or a
// slow API server): retried with backoff maxBypassRetries times, then reported once (a
// ConfigReadTimeout Event, configstamp_read_timeouts_total) and left alone until its next
// event, or the re-check's next pass, which tries it once more, quietly. So a workload
// that cannot be read in time spends the shared read budget in bounded amounts. Without
// the re-check nothing would try it again, and a change it owes would never roll: it is
// retried about every unreadRetry instead, as unread config is.
func (r *workloadReconciler) readTimedOut(ctx context.Context, obj client.Object, sources int, err error) (reconcile.Result, error) {
	key := client.ObjectKeyFromObject(obj)
	checks.WithLabelValues("read_timeout").Inc()
	if r.state.quietRetry(key) {
		logf.FromContext(ctx).V(1).Info("Re-check: config reads still run past their deadline; left alone until the next pass", "sources", sources)
		r.state.abandon(key)
		return reconcile.Result{}, nil
	}
	n := r.state.countTimeout(key)
	l := owedLines{
		retrying: "Config reads ran past their deadline; retrying",
		later:    "Config reads still run past their deadline; retrying later",
		err:      fmt.Errorf("%s %s: %w", r.kind, key, err),
		kv:       []any{"sources", sources},
	}
	if r.recheck {
		l.later = "Config reads still run past their deadline; left alone until its next event or the re-check"
		l.leave = func() { r.state.abandon(key) }
	}
	return owedRetry(ctx, n, l, func() {
		readTimeouts.Inc()
		r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonConfigReadTimeout, "Check",
			"Not checked after %d tries: reading its %d sources ran past --read-timeout each time (too many, or missing, for the watcher's client budget, or a slow API server); tried again %s",
			n, sources, r.timeoutRetry())
	})
}

// timeoutRetry says when a check whose reads keep timing out is tried again.
func (r *workloadReconciler) timeoutRetry() string {
	if r.recheck {
		return "at its next event or re-check"
	}
	return "about every " + unreadRetry.String() + " (the re-check is off)"
}

// keyMismatch handles a check that met another hash key than the watcher's (why says
// where) and cannot go on: no rollout on a key mismatch alone (that would roll once under
// each key). The replicas read the key Secret again within its refresh, so it is retried
// with backoff maxBypassRetries times, then, with one HashKeyMismatch Event, every
// unreadRetry, until the keys agree or an event starts over.
func (r *workloadReconciler) keyMismatch(ctx context.Context, obj client.Object, why string) (reconcile.Result, error) {
	key := client.ObjectKeyFromObject(obj)
	n := r.state.countKeyMismatch(key)
	checks.WithLabelValues("key_mismatch").Inc()
	return owedRetry(ctx, n, owedLines{
		retrying: "Not rolled: the hash keys disagree; retrying",
		later:    "The hash keys still disagree; retrying later",
		err:      fmt.Errorf("%s %s: not rolled: %s; retrying", r.kind, key, why),
		kv:       []any{"why", why},
	}, func() {
		keyMismatches.Inc()
		r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonHashKeyMismatch, "Check",
			"Not rolled after %d checks: %s (do all replicas read the same --hash-key Secret?); retrying about every %s",
			n, why, unreadRetry)
	})
}

// reportRolled reports a rollout a nudge caused. Its ConfigChanged Event gives the
// change cause the webhook wrote for this rollout (read back from the patch's answer),
// or, where it wrote none (no room), the same text made from ro, what the watcher knew
// before the nudge.
func (r *workloadReconciler) reportRolled(ctx context.Context, obj client.Object, tmpl *corev1.PodTemplateSpec, ro stamp.Rollout) {
	key := client.ObjectKeyFromObject(obj)
	r.state.resetBypasses(key)
	r.rolled(key)
	r.state.countRoll(key)
	checks.WithLabelValues("nudged").Inc()
	reason, ok := stamp.OwnChangeReason(obj.GetAnnotations()[stamp.ChangeCauseAnnotation])
	if !ok {
		reason = stamp.ChangeReason(ro)
	}
	if wave := waveNote(ctx); wave != "" && !strings.Contains(reason, wave) {
		// The webhook's cause names the wave (from the nudge's record); an older one's
		// does not.
		reason += " (" + wave + ")"
	}
	if r.kind.NoPods() {
		r.recorder.Eventf(obj, nil, corev1.EventTypeNormal, ReasonConfigChanged, "Nudge", "Restamped for its next run (nothing started): %s", reason)
	} else {
		r.recorder.Eventf(obj, nil, corev1.EventTypeNormal, ReasonConfigChanged, "Nudge", "Rolled: %s", reason)
	}
	r.notifyRolled(ctx, obj, ro.StoredSources, tmpl.Annotations[stamp.SourcesAnnotation], tmpl.Annotations[stamp.HashAnnotation], reason)
	logf.FromContext(ctx).Info("Nudged "+r.kind.Kind+" after a config change", "oldHash", ro.Ran, "newHash", tmpl.Annotations[stamp.HashAnnotation],
		"reason", reason)
}

// changedBack reports whether the config read after the nudge (hash) is what obj's
// certain record for tmpl says its pods run: it changed back, so the webhook rightly
// kept what is stored (a stale stamp included), and nothing needs to roll.
func (r *workloadReconciler) changedBack(ctx context.Context, obj client.Object, tmpl *corev1.PodTemplateSpec, refs []stamp.Source, hash string) bool {
	rec, ok := stamp.ObservedWith(obj.GetAnnotations(), workload.TemplateFingerprint(tmpl))
	if !ok || !rec.Certain(refs) || rec.Hash != hash {
		return false
	}
	r.state.resetBypasses(client.ObjectKeyFromObject(obj))
	checks.WithLabelValues("current").Inc()
	logf.FromContext(ctx).V(1).Info("Config changed back to what the pods run before the nudge: nothing rolled", "hash", hash,
		"stamp", tmpl.Annotations[stamp.HashAnnotation])
	return true
}

// bypassed reports a nudge the webhook did not stamp, or a record write it did not
// admit, and retries it, maxBypassRetries times; then it is left alone until the next
// event.
func (r *workloadReconciler) bypassed(ctx context.Context, obj client.Object, got, want, why string) error {
	key := client.ObjectKeyFromObject(obj)
	bypasses.Inc()
	if r.state.quietRetry(key) {
		// The re-check's retry of a workload left alone: still not stamped. Left alone
		// again, without a new Event; the next pass tries once more.
		checks.WithLabelValues("bypass_abandoned").Inc()
		logf.FromContext(ctx).V(1).Info("Re-check: the stamp still bypasses the webhook; left alone until the next pass", "storedHash", got, "expectedHash", want)
		r.state.abandon(key)
		return nil
	}
	n := r.state.countBypass(key)
	if n > maxBypassRetries {
		checks.WithLabelValues("bypass_abandoned").Inc()
		r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonStampBypassed, "Verify",
			"Stored config hash %q still differs from the expected %q after %d nudges: %s; left alone until its next change",
			stamp.ShortHash(got), stamp.ShortHash(want), n, why)
		logf.FromContext(ctx).Info("Stopped retrying a stamp that bypassed the webhook", "storedHash", got, "expectedHash", want, "attempts", n)
		r.notifyHeld(obj, notify.Bypassed, want, fmt.Sprintf("stored config hash %s still differs from the expected %s after %d nudges: %s",
			stamp.ShortHash(got), stamp.ShortHash(want), n, why))
		r.state.resetBypasses(key)
		r.state.abandon(key)
		return nil
	}
	checks.WithLabelValues("bypassed").Inc()
	r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonStampBypassed, "Verify",
		"Stored config hash %q (expected %q) not admitted by the webhook after configstamp's update: %s; retrying",
		stamp.ShortHash(got), stamp.ShortHash(want), why)
	logf.FromContext(ctx).Info("Detected a stamp that bypassed the webhook; retrying", "storedHash", got, "expectedHash", want, "attempt", n)
	return fmt.Errorf("%s %s: stamp %q, want %q: webhook bypassed", r.kind, key, stamp.ShortHash(got), stamp.ShortHash(want))
}

// tooManySources reports a workload that consumes more than the source cap: the webhook
// keeps its stamp as stored, so it is neither read nor nudged. The metric counts every
// check; the Event and the log line come once per set of sources, then hourly.
func (r *workloadReconciler) tooManySources(ctx context.Context, obj client.Object, refs []stamp.Source) {
	checks.WithLabelValues("too_many_sources").Inc()
	if !r.state.reportTooMany(client.ObjectKeyFromObject(obj), sourceSet(refs), time.Now()) {
		return
	}
	r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonTooManySources, "Check",
		"Not rolled on config changes: it consumes %d sources, more than the cap of %d (--max-sources)", len(refs), r.sources.SourceCap())
	logf.FromContext(ctx).Info("Left alone: it consumes more sources than the cap", "sources", len(refs), "cap", r.sources.SourceCap())
}

// sourceSet identifies which sources refs names (a SHA-256 of their kinds and names, so
// that what is kept per workload stays small however many it consumes).
func sourceSet(refs []stamp.Source) string {
	h := sha256.New()
	for _, s := range refs {
		_, _ = fmt.Fprintf(h, "%d:%s%d:%s", len(s.Kind), s.Kind, len(s.Name), s.Name) // a hash.Hash never fails to write
	}
	return string(h.Sum(nil))
}

// tooLarge reports a workload whose stamp (part "pod template") or record (part
// "metadata") would take its annotations past the API server's size limit, and leaves it
// alone until it changes.
func (r *workloadReconciler) tooLarge(ctx context.Context, obj client.Object, part, want string) error {
	key := client.ObjectKeyFromObject(obj)
	r.state.markOversize(key)
	checks.WithLabelValues("too_large").Inc()
	what := "rolled on config changes"
	if part == "metadata" {
		what = "given its record of the config its pods run"
	}
	r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonStampTooLarge, "Check",
		"Not %s: configstamp's annotations would take the %s's %s annotations past the API server's limit of %d bytes; make them smaller",
		what, r.kind, part, stamp.AnnotationSizeLimit)
	logf.FromContext(ctx).Info("Left alone: configstamp's annotations would exceed the annotation size limit", "part", part,
		"wantHash", want, "limit", stamp.AnnotationSizeLimit)
	return nil
}
