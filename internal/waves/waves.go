// Package waves decides, for one change of a shared source, which of its consumers may
// roll now: canaries first, then growing waves, each once the waves before it have
// rolled and are available. It is a pure function of what the API shows (which consumers
// carry the change, their health, what is recorded of failures and what users asked):
// nothing is kept in memory, so a restart or a leader change goes on where it was, and
// no consumer rolls twice for one change.
package waves

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Keys users and the watcher write.
const (
	// Annotation on a ConfigMap or Secret: "on" (the cluster's steps, or DefaultSteps),
	// "off", or the steps themselves ("1,10%,50%"). It overrides the cluster's setting.
	Annotation = "configstamp.io/waves"
	// ThresholdAnnotation on a ConfigMap or Secret: waves apply only when at least this
	// many workloads consume it (default: the cluster's).
	ThresholdAnnotation = "configstamp.io/waves-threshold"
	// DeadlineAnnotation on a ConfigMap or Secret: how long a workload of a kind without
	// a deadline of its own may take to become available once rolled in a wave (a Go
	// duration, MinDeadline to MaxDeadline; default: the --waves-deadline flag's).
	DeadlineAnnotation = "configstamp.io/waves-deadline"
	// CommandAnnotation on a ConfigMap or Secret, written by `configstamp halt|resume`:
	// "halt <change>" or "resume <change>"; it names the change, so a new change (the
	// fix) is not held by an old command.
	CommandAnnotation = "configstamp.io/waves-command"
	// CanaryLabel marks the workloads that roll first.
	CanaryLabel = "configstamp.io/canary"
	// FailedAnnotation on a workload, written by the watcher when it failed a wave:
	// "<kind>/<name>@<change>: <why>", or "<kind>/<name>@<change>: resumed" once a user
	// resumed the change it failed. It survives restarts; a new change supersedes it.
	FailedAnnotation = "configstamp.io/waves-failed"
	// RolledAnnotation on a workload, written by the watcher's nudge that rolls it in a
	// wave (in the same patch: no write of its own): "<change>: wave N of M, <RFC3339>"
	// for each change it rolled to in waves ("; " between). It says the workload rolled
	// on that change (only those are judged by their health) and since when (the
	// deadline of kinds without their own), and names the wave for the webhook's change
	// cause. It survives restarts.
	RolledAnnotation = "configstamp.io/waves-rolled"
)

// DefaultSteps are the wave sizes after the canaries when none are configured.
const DefaultSteps = "1,10%,50%"

// The bounds of a DeadlineAnnotation.
const (
	MinDeadline = 30 * time.Second
	MaxDeadline = 24 * time.Hour
)

// Step is one wave's size: a count, or a percentage of all consumers (rounded up).
type Step struct {
	N       int
	Percent bool
}

// ParseSteps reads "1,10%,50%": the sizes of the waves after the canaries; the rest
// roll in a last wave.
func ParseSteps(v string) ([]Step, error) {
	var out []Step
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		s := Step{}
		num, pct := strings.CutSuffix(f, "%")
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 || pct && n > 100 {
			return nil, fmt.Errorf("wave step %q: want a count (1 or more) or a percentage (1%% to 100%%)", f)
		}
		s.N, s.Percent = n, pct
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no wave steps in %q", v)
	}
	return out, nil
}

// Settings say whether and how one source's changes roll in waves.
type Settings struct {
	On    bool
	Steps []Step
	// Threshold: waves apply only when at least this many workloads consume the source.
	Threshold int
	// Deadline bounds how long a rolled workload of a kind without a deadline of its own
	// may take to become available (0: the watcher's --waves-deadline).
	Deadline time.Duration
}

// ForSource applies a source's annotations over the cluster's settings. A bad value is
// reported and the cluster's setting kept (bad input never blocks a deploy).
func ForSource(cluster Settings, annotations map[string]string) (Settings, []string) {
	s := cluster
	var problems []string
	switch v := strings.TrimSpace(annotations[Annotation]); v {
	case "":
	case "off", "false":
		s.On = false
	case "on", "true":
		s.On = true
	default:
		if steps, err := ParseSteps(v); err != nil {
			problems = append(problems, err.Error())
		} else {
			s.On, s.Steps = true, steps
		}
	}
	if v, ok := annotations[ThresholdAnnotation]; ok {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err != nil || n < 0 {
			problems = append(problems, fmt.Sprintf("%s %q: want a count", ThresholdAnnotation, v))
		} else {
			s.Threshold = n
		}
	}
	if v, ok := annotations[DeadlineAnnotation]; ok {
		if d, err := time.ParseDuration(strings.TrimSpace(v)); err != nil || d < MinDeadline || d > MaxDeadline {
			problems = append(problems, fmt.Sprintf("%s %q: want a duration from %s to %s", DeadlineAnnotation, v, MinDeadline, MaxDeadline))
		} else {
			s.Deadline = d
		}
	}
	if len(s.Steps) == 0 {
		s.Steps, _ = ParseSteps(DefaultSteps)
	}
	return s, problems
}

// Member is one consumer of the source as the API shows it.
type Member struct {
	// ID is "kind/name" (lowercase kind), unique in the source's namespace.
	ID     string
	Canary bool
	// Rolled: its template carries the change (its digest of the source is the current
	// one): it rolled for it, or never needed to.
	Rolled bool
	// Ready: rolled and available (Health read only where Plan asks for it); a member
	// not Judged is Ready once Rolled.
	Ready bool
	// Judged: configstamp rolled it on this change (its RolledAnnotation names it), so
	// its health counts; Since is when. A member that carries the change without having
	// rolled on it (it consumes only keys the change did not touch, a user's update gave
	// it the change, or it has no stamp of the source) is not judged: a failure of its
	// own is not this change's.
	Judged bool
	Since  time.Time
	// Digest is the current content's digest of what it consumes of the source (12 hex
	// digits; "" not known).
	Digest string
	// Failed says why it failed this change ("" none): its controller gave up
	// (ProgressDeadlineExceeded), it was not available by the deadline, or a record of
	// that (FailedAnnotation). Resumed: a user resumed the change since.
	Failed  string
	Resumed bool
}

// Order sorts members as they roll: canaries, then the rest, each by ID.
func Order(members []Member) {
	slices.SortFunc(members, func(a, b Member) int {
		if a.Canary != b.Canary {
			if a.Canary {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.ID, b.ID)
	})
}

// Sizes are the waves' sizes for n consumers, canaries of them canaries (without any,
// the first consumer is the canary): the canaries, then steps, then the rest. Each wave
// has one member at least; the last one takes what is left.
func Sizes(n, canaries int, steps []Step) []int {
	if n <= 0 {
		return nil
	}
	first := max(min(canaries, n), 1)
	out := []int{first}
	left := n - first
	for _, s := range steps {
		if left <= 0 {
			break
		}
		size := s.N
		if s.Percent {
			size = (n*s.N + 99) / 100
		}
		size = min(max(size, 1), left)
		out = append(out, size)
		left -= size
	}
	if left > 0 {
		out = append(out, left)
	}
	return out
}

// Verdict is where a change stands, and what one consumer may do.
type Verdict struct {
	// Waves is how many waves the change has (0: not in waves: every consumer rolls).
	Waves int
	// Current is the wave rolling now (1-based; Waves+1 when all are done).
	Current int
	// Halted says why the change is halted ("": it is not): nothing more rolls.
	Halted string
	// Failed are the members that failed it, not resumed: they halt it.
	Failed []string
	// Waiting lists, for the current wave, the members not yet rolled and available.
	Waiting []string
}

// Plan tells where a change stands. members are every consumer of the source in its
// namespace, in any order (Plan orders them); ready(i) reads the health of members[i]
// and is called only for rolled members of the current wave and those before it (the
// caller reads them live), at most once each. userHalt is a user's halt of this change.
func Plan(s Settings, members []Member, userHalt bool, ready func(m *Member)) (Verdict, []Member) {
	if !s.On || len(members) < max(s.Threshold, 1) {
		return Verdict{}, members
	}
	Order(members)
	canaries := 0
	for _, m := range members {
		if m.Canary {
			canaries++
		}
	}
	sizes := Sizes(len(members), canaries, s.Steps)
	v := Verdict{Waves: len(sizes), Current: len(sizes) + 1}
	start := 0
	for w, size := range sizes {
		wave := members[start : start+size]
		start += size
		done := true
		for i := range wave {
			m := &wave[i]
			if m.Rolled && m.Judged && m.Failed == "" && !m.Resumed && ready != nil {
				ready(m)
			}
			if m.Failed != "" && !m.Resumed {
				v.Failed = append(v.Failed, m.ID+" "+m.Failed)
			}
			if !m.Rolled || !m.Ready && !m.Resumed {
				done = false
				v.Waiting = append(v.Waiting, m.ID)
			}
		}
		if !done {
			v.Current = w + 1
			break
		}
		v.Waiting = nil
	}
	switch {
	case len(v.Failed) > 0:
		v.Halted = strings.Join(v.Failed, "; ")
	case userHalt:
		v.Halted = "halted by a user (configstamp halt)"
	}
	return v, members
}

// WaveOf is the 1-based wave of the member id in ordered members (0: not a member).
func WaveOf(s Settings, members []Member, id string) int {
	canaries := 0
	for _, m := range members {
		if m.Canary {
			canaries++
		}
	}
	start := 0
	for w, size := range Sizes(len(members), canaries, s.Steps) {
		for _, m := range members[start : start+size] {
			if m.ID == id {
				return w + 1
			}
		}
		start += size
	}
	return 0
}

// FirstHeld is the first member, in rolling order, that waits for a wave after the
// current one and has not rolled ("": none, or the change is halted): the one held
// member worth checking again soon (the others wait to be woken when a wave is done).
// members are ordered (Plan).
func FirstHeld(s Settings, members []Member, v Verdict) string {
	if v.Waves == 0 || v.Halted != "" {
		return ""
	}
	canaries := 0
	for _, m := range members {
		if m.Canary {
			canaries++
		}
	}
	start := 0
	for w, size := range Sizes(len(members), canaries, s.Steps) {
		if w+1 > v.Current {
			for _, m := range members[start : start+size] {
				if !m.Rolled {
					return m.ID
				}
			}
		}
		start += size
	}
	return ""
}

// May reports whether the member in wave may roll now.
func (v Verdict) May(wave int) bool {
	return v.Waves == 0 || v.Halted == "" && wave <= v.Current
}

// ParseCommand reads a CommandAnnotation value: "halt" or "resume", and the change.
func ParseCommand(v string) (verb, change string) {
	verb, change, _ = strings.Cut(strings.TrimSpace(v), " ")
	if verb != "halt" && verb != "resume" {
		return "", ""
	}
	return verb, strings.TrimSpace(change)
}

// AnnotationPatch is a JSON merge patch setting one metadata annotation. It is encoded
// as JSON (not Go-quoted): a value holding a control character or invalid UTF-8 (a
// controller's condition message in a failure record) stays a valid patch.
func AnnotationPatch(key, value string) []byte {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	return b
}

// FailedRecord is the FailedAnnotation value for member id failing change (why), or
// resumed when why is "".
func FailedRecord(id, change, why string) string {
	if why == "" {
		why = "resumed"
	}
	return id + "@" + change + ": " + why
}

// ParseFailed reads a FailedAnnotation value for change: why it failed ("" none), and
// whether a user resumed it since.
func ParseFailed(v, change string) (why string, resumed bool) {
	head, why, ok := strings.Cut(v, ": ")
	if !ok {
		return "", false
	}
	_, c, ok := strings.Cut(head, "@")
	if !ok || c != change {
		return "", false
	}
	if why == "resumed" {
		return "", true
	}
	return why, false
}

// RolledEntry is one change a workload rolled to in waves, as its RolledAnnotation
// records it; Wave 0: it carries the change without rolling ("<change>: current",
// written for a workload without a stamp of the source whose check found nothing it
// reads changed).
type RolledEntry struct {
	Change      string // "configmap/shared=3f2a1c9e0b7d"
	Wave, Waves int
	At          time.Time
}

// Source is the source the change is of ("configmap/shared").
func (e RolledEntry) Source() string {
	src, _, _ := strings.Cut(e.Change, "=")
	return src
}

// Note names the wave: "wave 2 of 4 for configmap/shared".
func (e RolledEntry) Note() string {
	return fmt.Sprintf("wave %d of %d for %s", e.Wave, e.Waves, e.Source())
}

// maxRolled bounds the entries of a RolledAnnotation read: one per source a workload
// consumes in waves. The value is on the tenant's workload, read at every evaluation
// of each member: a value of 256 KiB of entries written by hand must not cost more.
const maxRolled = 64

// ParseRolled reads a RolledAnnotation value; entries that do not parse, and those past
// the first maxRolled, are left out.
func ParseRolled(v string) []RolledEntry {
	var out []RolledEntry
	fields := strings.SplitN(v, "; ", maxRolled+1)
	for _, f := range fields[:min(len(fields), maxRolled)] {
		change, rest, ok := strings.Cut(strings.TrimSpace(f), ": ")
		if !ok || !strings.Contains(change, "=") {
			continue
		}
		e := RolledEntry{Change: change}
		if rest == "current" {
			out = append(out, e)
			continue
		}
		var at string
		if n, err := fmt.Sscanf(rest, "wave %d of %d, %s", &e.Wave, &e.Waves, &at); err != nil || n != 3 || e.Wave < 1 || e.Wave > e.Waves {
			continue
		}
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			continue
		}
		e.At = t
		out = append(out, e)
	}
	return out
}

// RolledValue is the RolledAnnotation value that records adds over old: an entry of
// old for the same source as one of adds is replaced (a source rolls one change at a
// time), and one for a source not in keep is dropped (the workload no longer consumes
// it), so the value stays as small as the sources it consumes, and at most maxRolled.
func RolledValue(old string, adds []RolledEntry, keep func(src string) bool) string {
	var parts []string
	for _, e := range ParseRolled(old) {
		if keep(e.Source()) && !slices.ContainsFunc(adds, func(a RolledEntry) bool { return a.Source() == e.Source() }) {
			parts = append(parts, e.String())
		}
	}
	for _, a := range adds {
		parts = append(parts, a.String())
	}
	// The oldest go past maxRolled (ParseRolled would not read them).
	return strings.Join(parts[max(len(parts)-maxRolled, 0):], "; ")
}

func (e RolledEntry) String() string {
	if e.Wave == 0 {
		return e.Change + ": current"
	}
	return fmt.Sprintf("%s: wave %d of %d, %s", e.Change, e.Wave, e.Waves, e.At.UTC().Format(time.RFC3339))
}
