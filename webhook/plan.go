package webhook

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/configstamp/configstamp/internal/decide"
	"github.com/configstamp/configstamp/internal/waves"
	"github.com/configstamp/configstamp/stamp"
)

// configRead reads the workload's config live. A plan calls it only when its answer
// depends on the config, once (twice for a nudge under another key: keyRead).
type configRead func() (stamp.Stamp, error)

// keyRead reads the installation key again (rate-limited: hashkey.Keeper.Fresh) and
// returns its fingerprint; ok is false when it was not read (the key may be stale).
type keyRead func() (fingerprint string, ok bool)

// plan is the webhook's answer to one admission, as values: the handler turns it into
// the patch, the response, the log lines and the metrics.
type plan struct {
	// strip are incoming metadata annotations removed before all else: the marker, and
	// configstamp's change cause copied onto someone else's rollout.
	strip []string
	// template is what configstamp's pod-template annotations become ("": absent); nil
	// leaves them as they came.
	template map[string]string
	// metadata is what the record and the change cause become ("": absent); a key it
	// lacks stays as it came.
	metadata map[string]string
	warnings []string
	// audit are the audit annotations (nil: none).
	audit  map[string]string
	result string
	logs   []logLine
	// recordOmitted: stamped without a record, for want of room.
	recordOmitted bool
}

// logLine is one line of the admission's log (an error when err is set).
type logLine struct {
	err error
	msg string
	kv  []any
}

// planner makes one plan.
type planner struct {
	plan
	in      *input
	read    configRead
	readKey keyRead
	// meta are the metadata annotations as the size checks count them: a dropped
	// change cause left out.
	meta map[string]string
}

// plan decides the admission of in, reading config through read (and the key through
// readKey, nil: never).
func (in *input) plan(read configRead, readKey keyRead) plan {
	pl := &planner{plan: plan{result: resultSkipped}, in: in, read: read, readKey: readKey, meta: in.annotations}
	if in.marked {
		pl.strip = []string{stamp.NudgeAnnotation}
	}
	switch {
	case in.problem != "":
		pl.info("Left alone: its pod template does not decode", "namespace", in.reqNamespace, "name", in.reqName, "error", in.problem)
		pl.warnings = append(pl.warnings, undecodableWarning(in.problem))
		return pl.plan
	case in.tmpl == nil || in.skip:
		// Skipped, or no pod template of its own (a Rollout that refers to a
		// Deployment's).
		return pl.plan
	}
	if len(in.extraProblems) > 0 {
		pl.warnings = append(pl.warnings, extraSourcesWarning(in.extraProblems))
	}
	if in.overCap {
		pl.tooManySources()
		return pl.plan
	}
	if in.othersUpdate() {
		pl.keepAsStored()
	} else {
		pl.admit()
	}
	return pl.plan
}

// othersUpdate reports whether this is someone else's update that keeps the template,
// of a workload with a record (the watcher's to roll, after the debounce), unstamped (left
// alone: installing configstamp rolls nothing), or without room for a record.
func (in *input) othersUpdate() bool {
	return !in.templateChanged && !in.nudged && !in.resumed && (in.recValid || in.storedHash == "" || in.noRoom())
}

// keyPlaceholder stands for a key fingerprint where only a record's size counts.
var keyPlaceholder = strings.Repeat("0", stamp.KeyFingerprintChars)

// noRoom reports whether a stamp lacks a record because none fits: treated as recorded,
// so someone else's update does not roll it past the debounce and the watcher's pace.
func (in *input) noRoom() bool {
	return !in.recValid && in.storedHash != "" && !stamp.AnnotationsFit(in.annotations, map[string]string{
		stamp.ObservedAnnotation: in.observed(in.storedHash, keyPlaceholder), stamp.NudgeAnnotation: ""})
}

// dropsCause reports whether this is someone else's rollout carrying configstamp's cause
// of an earlier one: without it, `kubectl rollout history` shows no cause rather than a
// wrong one.
func (in *input) dropsCause() bool {
	cause := in.annotations[stamp.ChangeCauseAnnotation]
	return in.templateChanged && !in.nudged && stamp.IsOwnChangeCause(cause) &&
		(in.old == nil || in.old.GetAnnotations()[stamp.ChangeCauseAnnotation] == cause)
}

// keepAsStored answers someone else's update that keeps the template: what it carries of
// configstamp's stays as stored, unless it is what configstamp writes now.
func (pl *planner) keepAsStored() {
	current, err := pl.current()
	switch {
	case current:
	case err != nil:
		// A reinvocation after configstamp's own patch that cannot read config.
		pl.unread(err)
	default:
		pl.keep()
	}
}

// current reports whether the stamp and the record an update carries differ from the
// stored ones and are what configstamp would write now: a reinvocation after its own
// patch (another webhook changed the object since). It reads config only when they
// differ; the error is that read's.
func (pl *planner) current() (bool, error) {
	in := pl.in
	hash, record := in.tmpl.Annotations[stamp.HashAnnotation], in.annotations[stamp.ObservedAnnotation]
	if (hash == "" || hash == in.storedHash) && (record == "" || record == in.record[stamp.ObservedAnnotation]) {
		return false, nil
	}
	want, err := pl.read()
	if err != nil {
		return false, err
	}
	if want.Hash == "" || hash != want.Hash {
		return false, nil
	}
	rec, ok := stamp.ObservedFor(in.annotations, in.tmpl)
	return ok && rec.Hash == want.Hash, nil
}

// admit answers a nudge, a new template, or an update of a workload that was stamped
// without a record: from the config as it is now.
func (pl *planner) admit() {
	in := pl.in
	if in.dropsCause() {
		pl.strip = append(pl.strip, stamp.ChangeCauseAnnotation)
		pl.meta = maps.Clone(in.annotations)
		delete(pl.meta, stamp.ChangeCauseAnnotation)
	}
	want, err := pl.read()
	if err != nil {
		pl.unread(err)
		return
	}
	rolls := (in.nudged || in.resumed) && !in.templateChanged // configstamp's own rollout, if any
	if theirs, ok := in.keyToMatch(); ok {
		if want, err = pl.underKey(want, theirs); err != nil {
			pl.unread(err)
			return
		}
		if want.Key != theirs {
			pl.otherKey(want.Key)
			return
		}
	}
	if unmet := decide.HeldBy(in.basis, want); len(unmet) > 0 && !in.templateChanged {
		pl.hold(unmet)
		return
	}
	if rolls && decide.ChangedBack(in.storedHash, want.Hash, in.certain, in.rec.Hash) {
		pl.info("Kept the stored config hash: the pods run the config as it is now (their record)", "namespace", in.namespace, "name", in.name,
			"storedHash", in.storedHash, "recordHash", in.rec.Hash)
		pl.keep()
		pl.result = resultUnchanged
		return
	}
	restart := rolls && stamp.NeedsRestart(in.storedHash, want.Hash, in.certain, in.rec.Hash)
	if !decide.StampFits(in.tmpl.Annotations, want, restart) {
		pl.tooLarge()
		return
	}
	pl.stamp(want, rolls, restart)
}

// keyToMatch is the key configstamp's own rollout of a kept template must be stamped
// under, when there is one: a nudge's (none named: an older watcher's, kept as stored);
// for a resume, the record's, when it names one (restamped under a stale key, the
// workload would roll once more for the key).
func (in *input) keyToMatch() (string, bool) {
	switch {
	case in.templateChanged:
		return "", false
	case in.nudged:
		return in.nudgeKey, true
	case in.resumed && in.recValid && in.rec.Key != "":
		return in.rec.Key, true
	}
	return "", false
}

// underKey returns want, or, when theirs (the key a nudge names, or a record's) is
// another than want was computed under, the stamp under the key read again: this
// replica's key may be the stale one. Only a write that will be stamped reads the key.
func (pl *planner) underKey(want stamp.Stamp, theirs string) (stamp.Stamp, error) {
	if theirs == "" || want.Key == theirs || pl.readKey == nil {
		return want, nil
	}
	if fp, ok := pl.readKey(); !ok || fp == want.Key {
		return want, nil
	}
	return pl.read()
}

// otherKey answers configstamp's own rollout of a kept template under another key than
// ours: a nudge (the replicas have not all read the key since it rotated; a watcher of
// an older version, whose nudge names none; or a forged nudge), or a resume of a
// workload recorded under another key. What is stored stays, so a workload does not roll
// once under each key (or encoding); the warning tells the watcher to retry (a resume's
// check is the watcher's anyway).
func (pl *planner) otherKey(ours string) {
	in := pl.in
	if !in.nudged {
		pl.info("Kept the stored config hash: the resume reached a replica holding another hash key than the record's", "namespace", in.namespace,
			"name", in.name, "recordKey", in.rec.Key, "key", ours)
		pl.keep()
		pl.result = resultOtherKey
		return
	}
	pl.info("Kept the stored config hash: the nudge was sent under another hash key", "namespace", in.namespace, "name", in.name,
		"storedHash", in.storedHash, "nudgeKey", in.nudgeKey, "key", ours)
	pl.keep()
	pl.warnings = append(pl.warnings, stamp.OtherKeyWarning(in.kind.Kind, in.nudgeKey, ours))
	theirs := in.nudgeKey
	if theirs == "" {
		theirs = "none"
	}
	pl.audit = map[string]string{AuditOtherKey: theirs + " (webhook: " + ours + ")"}
	pl.result = resultOtherKey
}

// hold answers a nudge, or someone's update that keeps the template, while required
// config is missing: rolling now would start pods that cannot start. What is stored
// stays; the watcher reports it.
func (pl *planner) hold(unmet []string) {
	in := pl.in
	pl.info("Kept the stored config hash: required config is missing", "namespace", in.namespace, "name", in.name,
		"operation", in.operation, "user", in.user, "storedHash", in.storedHash, "missing", unmet)
	pl.keep()
	pl.warnings = append(pl.warnings, heldWarning(unmet))
	pl.result = resultHeld
}

// tooLarge answers when the API server would refuse the template with the stamp in it:
// admitted without one (the watcher does not nudge it either; it reports it).
func (pl *planner) tooLarge() {
	in := pl.in
	pl.info("Left unstamped: the stamp would exceed the pod template's annotation size limit", "namespace", in.namespace, "name", in.name,
		"operation", in.operation, "user", in.user, "limit", stamp.AnnotationSizeLimit)
	pl.warnings = append(pl.warnings, tooLargeWarning(in.kind.Kind))
	if in.templateChanged {
		// A stamp or record it carries describes other pods than the new template's
		// (removing only shrinks).
		pl.template = unstamped()
		pl.metadata = map[string]string{stamp.ObservedAnnotation: ""}
	} else {
		pl.keep()
	}
	pl.result = resultTooLarge
}

// tooManySources answers a workload consuming more sources than the cap, before any
// read: the stamp stays as stored (none on a CREATE), so it neither rolls nor gets a
// stamp of part of its config; the watcher reports it (Event TooManySources).
func (pl *planner) tooManySources() {
	in := pl.in
	pl.keep()
	pl.warnings = append(pl.warnings, tooManySourcesWarning(in.kind.Kind, len(in.srcs), in.capacity))
	pl.result = resultTooManySources
}

// stamp gives the template want's stamp and the metadata the record of it; rolls: it is
// configstamp's own rollout, restart: by a restart time.
func (pl *planner) stamp(want stamp.Stamp, rolls, restart bool) {
	in := pl.in
	restartedAt := ""
	if restart {
		restartedAt = in.now.UTC().Format(time.RFC3339)
	}
	pl.template = stamp.TemplateAnnotations(want.Hash, want.SourcesAnnotation(), restartedAt)
	fits := func(record string) bool {
		return stamp.AnnotationsFit(pl.meta, map[string]string{stamp.ObservedAnnotation: record, stamp.NudgeAnnotation: ""})
	}
	record := ""
	if want.Hash != "" {
		// Pods its controller keeps (OnDelete, a partition) run what they ran; where
		// that does not fit, the record of the new template's pods alone.
		record = in.observedBehind(want.Hash, want.Key, decide.RecordBehind(in.partial, in.old == nil, in.oldRec, in.oldRecValid, in.oldBehind, in.storedHash, want.Hash))
		if !fits(record) {
			record = in.observed(want.Hash, want.Key)
		}
	}
	pl.metadata = map[string]string{}
	keys := pl.keys(want, record)
	if keys != in.annotations[stamp.KeysAnnotation] {
		pl.metadata[stamp.KeysAnnotation] = keys
	}
	if rolls && (want.Hash != in.storedHash || restart) {
		pl.metadata[stamp.ChangeCauseAnnotation] = pl.cause(want, record, keys, restart)
	}
	if !fits(record) {
		// The watcher then judges it from its stamp and the times of its pods and config.
		pl.info("Stamped without a record: it would exceed the annotation size limit", "namespace", in.namespace, "name", in.name,
			"operation", in.operation, "user", in.user, "limit", stamp.AnnotationSizeLimit)
		pl.warnings = append(pl.warnings, noRecordWarning(in.kind.Kind))
		pl.recordOmitted = true
		record = ""
	}
	pl.metadata[stamp.ObservedAnnotation] = record
	if unmet := want.Unmet(); len(unmet) > 0 {
		pl.warnings = append(pl.warnings, missingWarning(unmet))
	}
	if want.Hash != "" {
		pl.audit = map[string]string{AuditHash: want.Hash, AuditSources: want.SourcesAnnotation()}
	}
	if want.Hash == in.basis {
		pl.result = resultUnchanged
		return
	}
	pl.info("Stamped config hash",
		"namespace", in.namespace, "name", in.name, "operation", in.operation,
		"user", in.user, "oldHash", in.basis, "newHash", want.Hash,
		"sources", want.SourcesAnnotation(), "dryRun", in.dryRun)
	pl.result = resultStamped
}

// cause is the change cause of configstamp's rollout to want, for `kubectl rollout
// history`: none when it would not leave the controllers their headroom
// (stamp.CauseHeadroom).
func (pl *planner) cause(want stamp.Stamp, record, keys string, restart bool) string {
	in := pl.in
	ran := ""
	if in.certain {
		ran = in.rec.Hash
	}
	cause := stamp.ChangeCause(stamp.Rollout{StoredHash: in.storedHash, StoredSources: in.stored.Annotations[stamp.SourcesAnnotation],
		Hash: want.Hash, Sources: want.SourcesAnnotation(), Ran: ran, Restart: restart, StoredKeys: in.storedKeys(), Keys: keys,
		Wave: in.waveNote()})
	if !stamp.AnnotationsFitWithin(pl.meta, map[string]string{stamp.ObservedAnnotation: record, stamp.NudgeAnnotation: "",
		stamp.KeysAnnotation: keys, stamp.ChangeCauseAnnotation: cause}, stamp.CauseHeadroom) {
		return ""
	}
	return cause
}

// keys is the keys annotation (stamp.KeysAnnotation) of want: "" (none) when the
// workload has no stamp, or when it would not leave the controllers their headroom
// (stamp.CauseHeadroom): then configstamp's rollouts say "keys: unknown".
func (pl *planner) keys(want stamp.Stamp, record string) string {
	if want.Hash == "" {
		return ""
	}
	keys := stamp.KeysValue(want, pl.in.storedKeys())
	if !stamp.AnnotationsFitWithin(pl.meta, map[string]string{stamp.ObservedAnnotation: record, stamp.NudgeAnnotation: "", stamp.KeysAnnotation: keys},
		stamp.CauseHeadroom) {
		return ""
	}
	return keys
}

// waveNote names the waves a nudge rolls in ("wave 2 of 4 for configmap/shared"): the
// entries of waves.RolledAnnotation the nudge itself writes (not stored before); ""
// for anyone else's update.
func (in *input) waveNote() string {
	v := in.annotations[waves.RolledAnnotation]
	if !in.nudged || v == "" {
		return ""
	}
	var before map[string]string
	if in.old != nil {
		before = in.old.GetAnnotations()
	}
	stored := waves.ParseRolled(before[waves.RolledAnnotation])
	var notes []string
	for _, e := range waves.ParseRolled(v) {
		if e.Wave > 0 && !slices.ContainsFunc(stored, func(o waves.RolledEntry) bool { return o.String() == e.String() }) {
			notes = append(notes, e.Note())
		}
	}
	return strings.Join(notes, ", ")
}

// storedKeys is the keys annotation stored with the stamp: the old object's; none on a
// CREATE (the incoming one is the client's, not configstamp's).
func (in *input) storedKeys() string {
	if in.old != nil {
		return in.old.GetAnnotations()[stamp.KeysAnnotation]
	}
	return ""
}

// unread answers an update whose config could not be read: what is stored, and a
// warning saying so (the watcher tells an unread nudge by it).
func (pl *planner) unread(err error) {
	in := pl.in
	pl.logs = append(pl.logs, logLine{err: err, msg: "Admitted with the stored config hash: could not read config",
		kv: []any{"namespace", in.namespace, "name", in.name, "storedHash", in.storedHash}})
	pl.keep()
	pl.warnings = append(pl.warnings, stamp.UnreadWarning(in.kind.Kind, in.storedHash, err))
	pl.result = resultReadError
}

// keep puts back the stored stamp and record, each only where it fits.
func (pl *planner) keep() {
	in := pl.in
	pl.template = restored(in.stored.Annotations, in.tmpl.Annotations)
	record := in.record[stamp.ObservedAnnotation]
	if !stamp.AnnotationsFit(pl.meta, map[string]string{stamp.ObservedAnnotation: record, stamp.NudgeAnnotation: ""}) {
		// A record put back would make the API server refuse the update; without one,
		// the watcher judges from the stamp.
		pl.info("Left the record out: it would exceed the annotation size limit", "namespace", in.reqNamespace, "name", in.reqName,
			"limit", stamp.AnnotationSizeLimit)
		record = ""
	}
	pl.metadata = map[string]string{stamp.ObservedAnnotation: record}
	// The keys stay as stored too (none on a CREATE): a client's would make the next
	// cause name keys that did not change. Left out where they no longer fit.
	keys := in.storedKeys()
	if !stamp.AnnotationsFit(pl.meta, map[string]string{stamp.ObservedAnnotation: record, stamp.NudgeAnnotation: "", stamp.KeysAnnotation: keys}) {
		keys = ""
	}
	if keys != in.annotations[stamp.KeysAnnotation] {
		pl.metadata[stamp.KeysAnnotation] = keys
	}
}

// restored is what configstamp's template annotations become when the stored stamp (and
// restart time) stays: nil when none was stored; none of them when they do not fit in
// the incoming template (removing only shrinks; the watcher re-checks it).
func restored(stored, incoming map[string]string) map[string]string {
	hash := stored[stamp.HashAnnotation]
	if hash == "" {
		return nil
	}
	want := stamp.TemplateAnnotations(hash, stored[stamp.SourcesAnnotation], stored[stamp.RestartedAnnotation])
	if !stamp.AnnotationsFit(incoming, want) {
		return unstamped()
	}
	return want
}

// unstamped removes configstamp's annotations from a template.
func unstamped() map[string]string {
	return map[string]string{stamp.HashAnnotation: "", stamp.SourcesAnnotation: "", stamp.RestartedAnnotation: ""}
}

// write logs the plan's lines.
func (p *plan) write(log logr.Logger) {
	for _, l := range p.logs {
		if l.err != nil {
			log.Error(l.err, l.msg, l.kv...)
		} else {
			log.Info(l.msg, l.kv...)
		}
	}
}

// count adds the plan to the metrics of what changed (dry runs change nothing).
func (p *plan) count() {
	if p.recordOmitted {
		recordsOmitted.Inc()
	}
	if p.result == resultStamped {
		stampsChanged.Inc()
	}
}

func (pl *planner) info(msg string, kv ...any) {
	pl.logs = append(pl.logs, logLine{msg: msg, kv: kv})
}
