package watcher

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// trigger is why a workload is checked, kept beside the workqueue (which holds keys
// only) until the check takes it.
type trigger struct {
	// changed: a source it consumes really changed while the watcher watched (not a
	// replay of the initial list), so its pods run older config than what is current.
	changed bool
	// event: an event queued it (not the retry of a failed check), so a bypass gets a
	// new set of retries.
	event bool
	// handoff: a source's debounce handed it on (the burst is over, though the source
	// stays pending until every dependent is handed on).
	handoff bool
	// recheck: the periodic re-check queued it (something it depends on moved since its
	// last finished check).
	recheck bool
}

// workloadState is what the watcher keeps of one workload between its checks.
type workloadState struct {
	// trigger is why it is queued, until its check takes it.
	trigger trigger
	// lastRoll is when configstamp last rolled it (zero: not remembered).
	lastRoll time.Time
	// bypasses counts its nudges that did not roll.
	bypasses int
	// unreads counts its nudges the webhook could not stamp for want of config it could
	// read.
	unreads int
	// keyMismatches counts its checks that met another hash key than the watcher's
	// (a record, or the webhook's answer to a nudge) and could not go on.
	keyMismatches int
	// timeouts counts its checks whose config reads ran past their deadline.
	timeouts int
	// oversize, when not zero, marks it left alone because configstamp's annotations
	// would take its own past the API server's size limit: an update of its annotations
	// is checked (it may have made room). The value tells the checks apart: a check
	// clears the mark only if it did not set it again.
	oversize uint64
	// rolls counts configstamp's rollouts of it.
	rolls uint64
	// abandoned: its last finished check left it alone after its bypass retries ran out;
	// quiet: the running check is the re-check's retry of it, one nudge and no new Event
	// if it is still bypassed.
	abandoned, quiet bool
	// tooManySet and tooManyAt are the sources (see sourceSet) it consumed, over the
	// cap, when it was last reported so, and when.
	tooManySet string
	tooManyAt  time.Time
}

func (s *workloadState) empty() bool {
	return s.trigger == (trigger{}) && s.lastRoll.IsZero() && s.bypasses == 0 && s.unreads == 0 && s.keyMismatches == 0 && s.timeouts == 0 && s.oversize == 0 &&
		s.rolls == 0 && s.tooManyAt.IsZero() && !s.abandoned && !s.quiet
}

// workloadStates holds the state of each workload of one kind, by namespace and name.
// The workload's event handlers, the namespace events, the sources' hand-offs and the
// checks all use it, under its one mutex. The zero value is ready to use.
type workloadStates struct {
	mu sync.Mutex
	m  map[types.NamespacedName]*workloadState
	// checked is each workload's fingerprint taken before its last check that ended with
	// nothing left to do; the re-check skips it while it holds. Nearly every workload has
	// one and most have nothing else: kept apart from m, it costs a map entry, not a
	// workloadState.
	checked map[types.NamespacedName]uint64
	// seq is the last oversize mark given.
	seq uint64
	// swept is when rolled last forgot old rollouts.
	swept time.Time
}

// get returns key's state, made if it has none; the caller holds mu.
func (s *workloadStates) get(key types.NamespacedName) *workloadState {
	if s.m == nil {
		s.m = map[types.NamespacedName]*workloadState{}
	}
	st, ok := s.m[key]
	if !ok {
		st = &workloadState{}
		s.m[key] = st
	}
	return st
}

// peek returns a copy of key's state (zero when it has none); the caller holds mu.
func (s *workloadStates) peek(key types.NamespacedName) workloadState {
	if st, ok := s.m[key]; ok {
		return *st
	}
	return workloadState{}
}

// tidy drops key's state once nothing is left of it; the caller holds mu.
func (s *workloadStates) tidy(key types.NamespacedName) {
	if st, ok := s.m[key]; ok && st.empty() {
		delete(s.m, key)
	}
}

// addTrigger merges t into key's pending trigger.
func (s *workloadStates) addTrigger(key types.NamespacedName, t trigger) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := &s.get(key).trigger
	cur.changed = cur.changed || t.changed
	cur.event = cur.event || t.event
	cur.handoff = cur.handoff || t.handoff
	cur.recheck = cur.recheck || t.recheck
}

// recheckOnly reports whether only the periodic re-check queued the check.
func (t trigger) recheckOnly() bool { return t.recheck && !t.event && !t.changed && !t.handoff }

// setChecked keeps fp as key's fingerprint at its last finished check.
func (s *workloadStates) setChecked(key types.NamespacedName, fp uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.checked == nil {
		s.checked = map[types.NamespacedName]uint64{}
	}
	s.checked[key] = fp
}

// uncheck drops key's fingerprint: the next pass checks it, if it is there.
func (s *workloadStates) uncheck(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.checked, key)
}

// checkedAs returns key's fingerprint at its last finished check, or a value no
// fingerprint has when there is none (fingerprints are 64-bit sums: a collision only
// skips one pass for that workload).
func (s *workloadStates) checkedAs(key types.NamespacedName) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	fp, ok := s.checked[key]
	if !ok {
		return ^fp // differs from every fingerprint equal to fp (0)
	}
	return fp
}

// beginCheck starts a check of key: it returns whether its last finished check left it
// alone after its bypass retries ran out, and makes this check a quiet retry when so and
// only the re-check queued it (a new event gives it a full round of retries again).
func (s *workloadStates) beginCheck(key types.NamespacedName, recheckOnly bool) (wasAbandoned bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.get(key)
	wasAbandoned = st.abandoned
	st.abandoned, st.quiet = false, wasAbandoned && recheckOnly
	return wasAbandoned
}

// endCheck ends a check of key: a finished one leaves it as the check did (abandon), an
// unfinished one (retried) as it was before.
func (s *workloadStates) endCheck(key types.NamespacedName, finished, wasAbandoned bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.get(key)
	if !finished {
		st.abandoned = wasAbandoned
	}
	st.quiet = false
	s.tidy(key)
}

// abandon marks key left alone by its running check after its bypass retries ran out.
func (s *workloadStates) abandon(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.get(key).abandoned = true
}

// isAbandoned reports whether key's last finished check left it alone.
func (s *workloadStates) isAbandoned(key types.NamespacedName) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peek(key).abandoned
}

// quietRetry reports whether key's running check is the re-check's quiet retry.
func (s *workloadStates) quietRetry(key types.NamespacedName) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peek(key).quiet
}

// countRoll counts one more rollout of key by configstamp.
func (s *workloadStates) countRoll(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.get(key).rolls++
}

// rollsOf is how many rollouts of key configstamp has counted.
func (s *workloadStates) rollsOf(key types.NamespacedName) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peek(key).rolls
}

// takeTrigger removes key's pending trigger (zero when none is pending).
func (s *workloadStates) takeTrigger(key types.NamespacedName) trigger {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.m[key]
	if !ok {
		return trigger{}
	}
	t := st.trigger
	st.trigger = trigger{}
	s.tidy(key)
	return t
}

// changedSince reports whether a live change is pending for key: one that arrived after
// the running check took its trigger (that check must not record over it).
func (s *workloadStates) changedSince(key types.NamespacedName) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peek(key).trigger.changed
}

// countBypass counts one more nudge of key that did not roll, and returns the count.
func (s *workloadStates) countBypass(key types.NamespacedName) int {
	return s.count(key, func(st *workloadState) *int { return &st.bypasses })
}

// countUnread counts one more nudge of key the webhook could not stamp for want of
// config it could read, and returns the count.
func (s *workloadStates) countUnread(key types.NamespacedName) int {
	return s.count(key, func(st *workloadState) *int { return &st.unreads })
}

// countKeyMismatch counts one more check of key that met another hash key, and returns
// the count.
func (s *workloadStates) countKeyMismatch(key types.NamespacedName) int {
	return s.count(key, func(st *workloadState) *int { return &st.keyMismatches })
}

// countTimeout counts one more check of key whose config reads ran past their
// deadline, and returns the count.
func (s *workloadStates) countTimeout(key types.NamespacedName) int {
	return s.count(key, func(st *workloadState) *int { return &st.timeouts })
}

// count adds one to the counter of key's state that field names, and returns it.
func (s *workloadStates) count(key types.NamespacedName, field func(*workloadState) *int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := field(s.get(key))
	*n++
	return *n
}

// resetBypasses starts key's counts of nudges that did not roll afresh.
func (s *workloadStates) resetBypasses(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.m[key]; ok {
		st.bypasses, st.unreads, st.keyMismatches, st.timeouts = 0, 0, 0, 0
		s.tidy(key)
	}
}

// markOversize marks key left alone for size, with a mark no other check has.
func (s *workloadStates) markOversize(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	s.get(key).oversize = s.seq
}

// oversizeMark returns key's oversize mark (zero: none).
func (s *workloadStates) oversizeMark(key types.NamespacedName) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peek(key).oversize
}

// clearOversize clears key's oversize mark if it is still mark.
func (s *workloadStates) clearOversize(key types.NamespacedName, mark uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.m[key]; ok && st.oversize == mark {
		st.oversize = 0
		s.tidy(key)
	}
}

func (s *workloadStates) isOversize(key types.NamespacedName) bool {
	return s.oversizeMark(key) != 0
}

// tooManyEvery is how often a workload left over the source cap, with the same sources,
// is reported again (its Event): every check would repeat it.
const tooManyEvery = time.Hour

// reportTooMany reports whether key, over the source cap consuming set, is to be
// reported at now: the first time, when set differs from the last report's, or
// tooManyEvery after it. A report it allows is remembered.
func (s *workloadStates) reportTooMany(key types.NamespacedName, set string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.get(key)
	if st.tooManySet == set && !st.tooManyAt.IsZero() && now.Sub(st.tooManyAt) < tooManyEvery {
		return false
	}
	st.tooManySet, st.tooManyAt = set, now
	return true
}

// untilNextRoll is how long until key may be rolled again (zero: now).
func (s *workloadStates) untilNextRoll(key types.NamespacedName, minInterval time.Duration) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	last := s.peek(key).lastRoll
	if last.IsZero() {
		return 0
	}
	return max(0, minInterval-time.Since(last))
}

// rolled remembers a rollout of key; rollouts older than minInterval are forgotten as
// it goes.
func (s *workloadStates) rolled(key types.NamespacedName, minInterval time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	// The sweep is over every workload with a state, so at most once per minInterval,
	// not at every rollout of a fan-out.
	if len(s.m) > 256 && now.Sub(s.swept) >= minInterval {
		s.swept = now
		for k, st := range s.m {
			if !st.lastRoll.IsZero() && now.Sub(st.lastRoll) >= minInterval {
				st.lastRoll = time.Time{}
				s.tidy(k)
			}
		}
	}
	s.get(key).lastRoll = now
}

// forget drops all that is kept of a workload that is gone, but a pending trigger: the
// check queued with it takes it.
func (s *workloadStates) forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.checked, key)
	if st, ok := s.m[key]; ok {
		*st = workloadState{trigger: st.trigger}
		s.tidy(key)
	}
}

// untilNextRoll is how long until the workload may be rolled again (zero: now).
func (r *workloadReconciler) untilNextRoll(key types.NamespacedName) time.Duration {
	if r.minInterval <= 0 {
		return 0
	}
	return r.state.untilNextRoll(key, r.minInterval)
}

// rolled remembers a rollout, when rollouts are spaced.
func (r *workloadReconciler) rolled(key types.NamespacedName) {
	if r.minInterval > 0 {
		r.state.rolled(key, r.minInterval)
	}
}
