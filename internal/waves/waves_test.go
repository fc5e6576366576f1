package waves

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func steps(t *testing.T, v string) []Step {
	t.Helper()
	s, err := ParseSteps(v)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSizes(t *testing.T) {
	for _, c := range []struct {
		n, canaries int
		steps       string
		want        []int
	}{
		{21, 0, "1,10%,50%", []int{1, 1, 3, 11, 5}},
		{21, 2, "1,10%,50%", []int{2, 1, 3, 11, 4}},
		{1, 0, "1,10%,50%", []int{1}},
		{3, 0, "1,10%,50%", []int{1, 1, 1}},
		{5, 9, "50%", []int{5}},
		{10, 0, "100%", []int{1, 9}},
		{0, 0, "1", nil},
	} {
		got := Sizes(c.n, c.canaries, steps(t, c.steps))
		if !slices.Equal(got, c.want) {
			t.Errorf("Sizes(%d, %d, %s) = %v, want %v", c.n, c.canaries, c.steps, got, c.want)
		}
	}
}

func TestParseSteps(t *testing.T) {
	for _, bad := range []string{"", "0", "x", "101%", "-1", ","} {
		if _, err := ParseSteps(bad); err == nil {
			t.Errorf("ParseSteps(%q) took it", bad)
		}
	}
	if got := steps(t, " 2, 25% "); !slices.Equal(got, []Step{{2, false}, {25, true}}) {
		t.Errorf("ParseSteps = %v", got)
	}
}

func TestForSource(t *testing.T) {
	cluster := Settings{Threshold: 5}
	s, p := ForSource(cluster, map[string]string{Annotation: "1,50%", ThresholdAnnotation: "2"})
	if !s.On || s.Threshold != 2 || len(s.Steps) != 2 || len(p) != 0 {
		t.Errorf("steps annotation: %+v %v", s, p)
	}
	if s, _ := ForSource(Settings{On: true}, map[string]string{Annotation: "off"}); s.On {
		t.Error("off kept waves on")
	}
	s, p = ForSource(cluster, map[string]string{Annotation: "sometimes"})
	if s.On || len(p) != 1 {
		t.Errorf("a bad value: %+v %v (want the cluster's setting and a problem)", s, p)
	}
	if s, _ := ForSource(cluster, map[string]string{Annotation: "on"}); !s.On || len(s.Steps) != 3 {
		t.Errorf("on: %+v (want DefaultSteps)", s)
	}
}

// TestForSourceDeadline: a source's deadline annotation within bounds is kept; a bad
// or out-of-bounds one is a problem and the cluster's (the flag's: 0) stays.
func TestForSourceDeadline(t *testing.T) {
	if s, p := ForSource(Settings{}, map[string]string{DeadlineAnnotation: " 90s "}); s.Deadline != 90*time.Second || len(p) != 0 {
		t.Errorf("90s: %+v %v", s, p)
	}
	if s, p := ForSource(Settings{}, map[string]string{DeadlineAnnotation: "24h"}); s.Deadline != MaxDeadline || len(p) != 0 {
		t.Errorf("24h: %+v %v", s, p)
	}
	for _, bad := range []string{"", "soon", "10", "1s", "25h", "-5m"} {
		if s, p := ForSource(Settings{}, map[string]string{DeadlineAnnotation: bad}); s.Deadline != 0 || len(p) != 1 {
			t.Errorf("%q: %+v %v (want no deadline and a problem)", bad, s, p)
		}
	}
	if s, _ := Resolve(Settings{}, map[string]string{DeadlineAnnotation: "5m"}, nil, nil); s.Deadline != 0 {
		t.Errorf("a namespace label set the deadline: %+v (only annotations do)", s)
	}
}

// fleet is n members named d00.., the canaries first.
func fleet(n int, canaries ...string) []Member {
	var out []Member
	for i := range n {
		id := fmt.Sprintf("deployment/d%02d", i)
		out = append(out, Member{ID: id, Canary: slices.Contains(canaries, id)})
	}
	// Plan orders them whatever order the cache lists them in.
	slices.Reverse(out)
	return out
}

func set(ms []Member, ids []string, f func(*Member)) {
	for i := range ms {
		if slices.Contains(ids, ms[i].ID) {
			f(&ms[i])
		}
	}
}

func TestPlan(t *testing.T) {
	on := Settings{On: true, Steps: []Step{{1, false}, {10, true}, {50, true}}, Threshold: 3}
	ready := func(m *Member) { m.Ready = true }
	// Rolled by configstamp on this change: judged by its health.
	rolled := func(m *Member) { m.Rolled, m.Judged = true, true }

	// A new change: only the canary (the first by name) may roll.
	v, ms := Plan(on, fleet(21), false, ready)
	if v.Waves != 5 || v.Current != 1 || !v.May(WaveOf(on, ms, "deployment/d00")) || v.May(WaveOf(on, ms, "deployment/d01")) {
		t.Fatalf("new change: %+v", v)
	}
	// A labelled canary goes first, whatever its name.
	_, ms = Plan(on, fleet(21, "deployment/d20"), false, ready)
	if ms[0].ID != "deployment/d20" || WaveOf(on, ms, "deployment/d20") != 1 || WaveOf(on, ms, "deployment/d00") != 2 {
		t.Fatalf("canary order: %v", ms[:2])
	}

	// The canary rolled but is not available yet: wave 1 still rolls; it is read.
	ms = fleet(21)
	set(ms, []string{"deployment/d00"}, rolled)
	reads := 0
	v, _ = Plan(on, ms, false, func(*Member) { reads++ })
	if v.Current != 1 || reads != 1 || !slices.Equal(v.Waiting, []string{"deployment/d00"}) {
		t.Fatalf("canary rolling: %+v, %d reads", v, reads)
	}
	// A member that carries the change without configstamp having rolled it on it (not
	// judged; Members makes it Ready) is not read: a failure of its own (it was broken
	// before the change) does not halt the change.
	ms = fleet(21)
	set(ms, []string{"deployment/d00"}, func(m *Member) { m.Rolled, m.Ready = true, true })
	reads = 0
	v, _ = Plan(on, ms, false, func(m *Member) { reads++; m.Failed = "ProgressDeadlineExceeded"; m.Ready = false })
	if v.Halted != "" || v.Current != 2 || reads != 0 {
		t.Fatalf("canary rolled before the change, broken: %+v, %d reads", v, reads)
	}
	// Available: wave 2 may roll, and no member past it is read.
	ms = fleet(21)
	set(ms, []string{"deployment/d00"}, rolled)
	reads = 0
	v, ms = Plan(on, ms, false, func(m *Member) { reads++; m.Ready = true })
	if v.Current != 2 || reads != 1 || !v.May(WaveOf(on, ms, "deployment/d01")) || v.May(WaveOf(on, ms, "deployment/d02")) {
		t.Fatalf("canary available: %+v, %d reads", v, reads)
	}

	// The canary failed: halted, nothing more rolls, not even its own wave's others.
	ms = fleet(21)
	set(ms, []string{"deployment/d00"}, rolled)
	v, _ = Plan(on, ms, false, func(m *Member) { m.Failed = "did not become available" })
	if v.Halted == "" || v.May(1) || len(v.Failed) != 1 {
		t.Fatalf("failed canary: %+v", v)
	}
	// Resumed: its failure no longer holds the change; wave 2 rolls (its health is not
	// read again: it stays failed).
	ms = fleet(21)
	set(ms, []string{"deployment/d00"}, func(m *Member) { m.Rolled, m.Resumed = true, true })
	v, _ = Plan(on, ms, false, func(m *Member) { m.Failed = "read again" })
	if v.Halted != "" || v.Current != 2 {
		t.Fatalf("resumed: %+v", v)
	}
	// A user's halt holds it, and resume lifts it (the caller drops userHalt).
	if v, _ := Plan(on, fleet(21), true, ready); v.Halted == "" || v.May(1) {
		t.Fatalf("user halt: %+v", v)
	}

	// Every member rolled and available: done, every wave may roll.
	ms = fleet(21)
	set(ms, nil, rolled)
	for i := range ms {
		ms[i].Rolled, ms[i].Judged = true, true
	}
	if v, _ := Plan(on, ms, false, ready); v.Current != 6 || !v.May(5) {
		t.Fatalf("all done: %+v", v)
	}
	// Below the threshold, or off: no waves, everyone may roll.
	if v, _ := Plan(on, fleet(2), false, ready); v.Waves != 0 || !v.May(2) {
		t.Fatalf("below threshold: %+v", v)
	}
	if v, _ := Plan(Settings{Steps: on.Steps}, fleet(21), false, ready); v.Waves != 0 {
		t.Fatalf("off: %+v", v)
	}
}

func TestRecords(t *testing.T) {
	rec := FailedRecord("deployment/a", "3f2a1c9e0b7d", "did not become available")
	if why, resumed := ParseFailed(rec, "3f2a1c9e0b7d"); why != "did not become available" || resumed {
		t.Errorf("ParseFailed(%q) = %q, %v", rec, why, resumed)
	}
	// A record of another change (superseded by the fix) says nothing of this one.
	if why, resumed := ParseFailed(rec, "000000000000"); why != "" || resumed {
		t.Errorf("another change: %q, %v", why, resumed)
	}
	if _, resumed := ParseFailed(FailedRecord("deployment/a", "c", ""), "c"); !resumed {
		t.Error("resumed record not read")
	}
	for v, want := range map[string][2]string{"halt abc": {"halt", "abc"}, "resume  abc ": {"resume", "abc"}, "stop abc": {"", ""}, "": {"", ""}} {
		if verb, c := ParseCommand(v); verb != want[0] || c != want[1] {
			t.Errorf("ParseCommand(%q) = %q %q", v, verb, c)
		}
	}
}

// The first held member is the first not rolled of the waves after the current one;
// none while halted or when nothing waits.
func TestFirstHeld(t *testing.T) {
	s := Settings{On: true, Steps: steps(t, "1"), Threshold: 1}
	ids := func(rolled ...bool) []Member {
		var out []Member
		for i, r := range rolled {
			out = append(out, Member{ID: fmt.Sprintf("deployment/%c", 'a'+i), Rolled: r, Ready: r})
		}
		return out
	}
	for _, c := range []struct {
		name    string
		members []Member
		halt    bool
		want    string
	}{
		{"canary rolling: the first of wave 2", ids(false, false, false, false), false, "deployment/b"},
		{"wave 2 rolling: the first of wave 3", ids(true, false, false, false), false, "deployment/c"},
		{"one of wave 3 rolled already (a user's update)", ids(true, false, true, false), false, "deployment/d"},
		{"halted", ids(false, false, false, false), true, ""},
		{"last wave rolling", ids(true, true, false, false), false, ""},
		{"done", ids(true, true, true, true), false, ""},
	} {
		v, members := Plan(s, c.members, c.halt, nil)
		if got := FirstHeld(s, members, v); got != c.want {
			t.Errorf("%s: %q (verdict %+v), want %q", c.name, got, v, c.want)
		}
	}
}

// A failure record holding a controller's message with a control character or invalid
// UTF-8 is still a valid merge patch, and sets exactly that annotation.
func TestAnnotationPatch(t *testing.T) {
	for _, v := range []string{"deployment/a@configmap/s=0123: ok", "why: \x7f\x00 bell\a", "bad utf-8 \xff\xfe", `quote " and \ backslash`} {
		var got struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(AnnotationPatch(FailedAnnotation, v), &got); err != nil {
			t.Fatalf("%q: not JSON: %v", v, err)
		}
		want := string([]rune(v)) // each invalid byte as U+FFFD, as encoding/json writes it
		if len(got.Metadata.Annotations) != 1 || got.Metadata.Annotations[FailedAnnotation] != want {
			t.Errorf("%q: annotations %q", v, got.Metadata.Annotations)
		}
	}
}

func TestRolledRecord(t *testing.T) {
	at := time.Date(2026, 12, 5, 21, 0, 0, 0, time.UTC)
	a := RolledEntry{Change: "configmap/a=111111111111", Wave: 2, Waves: 4, At: at}
	b := RolledEntry{Change: "secret/b=222222222222"}
	v := RolledValue("", []RolledEntry{a, b}, func(string) bool { return true })
	if want := "configmap/a=111111111111: wave 2 of 4, 2026-12-05T21:00:00Z; secret/b=222222222222: current"; v != want {
		t.Fatalf("RolledValue = %q, want %q", v, want)
	}
	if got := ParseRolled(v); !slices.Equal(got, []RolledEntry{a, b}) {
		t.Errorf("ParseRolled(%q) = %+v", v, got)
	}
	if a.Note() != "wave 2 of 4 for configmap/a" {
		t.Errorf("Note = %q", a.Note())
	}
	// A new change of a replaces its entry; c, no longer consumed, is dropped; junk is
	// left out.
	a2 := RolledEntry{Change: "configmap/a=333333333333", Wave: 1, Waves: 4, At: at}
	old := v + "; configmap/c=444444444444: current; junk; configmap/d=5: wave 9 of 2, x"
	v = RolledValue(old, []RolledEntry{a2}, func(src string) bool { return src != "configmap/c" })
	if got := ParseRolled(v); !slices.Equal(got, []RolledEntry{b, a2}) {
		t.Errorf("after a new change of a: %q", v)
	}
}

// A RolledAnnotation value is on the tenant's workload and read at every evaluation of
// each member: entries past maxRolled are not read, and a new entry is never one of them.
func TestRolledBounded(t *testing.T) {
	at := time.Date(2026, 12, 5, 21, 0, 0, 0, time.UTC)
	var many []string
	for i := range 10000 {
		many = append(many, RolledEntry{Change: fmt.Sprintf("configmap/c%d=111111111111", i), Wave: 1, Waves: 2, At: at}.String())
	}
	v := strings.Join(many, "; ")
	if got := len(ParseRolled(v)); got != maxRolled {
		t.Errorf("ParseRolled read %d entries, want %d", got, maxRolled)
	}
	add := RolledEntry{Change: "configmap/new=222222222222"}
	got := ParseRolled(RolledValue(v, []RolledEntry{add}, func(string) bool { return true }))
	if len(got) != maxRolled || !slices.Contains(got, add) {
		t.Errorf("after adding one: %d entries, the new one kept %v", len(got), slices.Contains(got, add))
	}
}
