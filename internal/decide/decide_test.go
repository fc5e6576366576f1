package decide

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/stamp"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeEvidence answers from fields and counts what was asked.
type fakeEvidence struct {
	bypassed    bool
	coveredAt   time.Time // Coverage.Since
	bypassedErr error
	since       time.Time
	podsOK      bool
	podsErr     error
	newer       bool
	written     time.Time // when set, the last write (ConfigNewer of any time)
	newerErr    error
	asked       []string
}

func (f *fakeEvidence) Coverage() (Coverage, error) {
	f.asked = append(f.asked, EvidenceCoverage)
	return Coverage{Bypassed: f.bypassed, Since: f.coveredAt}, f.bypassedErr
}

func (f *fakeEvidence) PodsSince() (time.Time, bool, error) {
	f.asked = append(f.asked, EvidencePods)
	return f.since, f.podsOK, f.podsErr
}

func (f *fakeEvidence) ConfigNewer(since time.Time) (bool, error) {
	f.asked = append(f.asked, EvidenceConfig)
	if !f.written.IsZero() {
		return !f.written.Before(since), f.newerErr
	}
	if !since.Equal(f.since) {
		return false, errors.New("asked about another time than PodsSince's")
	}
	return f.newer, f.newerErr
}

func want(hash string, digests ...stamp.Digest) stamp.Stamp {
	return stamp.Stamp{Hash: hash, Sources: digests}
}

func TestDecide(t *testing.T) {
	boom := errors.New("boom")
	tmpl := &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{stamp.HashAnnotation: "old"}}}
	full := &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"big": strings.Repeat("x", stamp.AnnotationSizeLimit-10)}}}
	missing := stamp.Digest{Kind: stamp.KindConfigMap, Name: "app", Missing: true, Unmet: "configmap/app is missing"}
	for _, tc := range []struct {
		name    string
		in      Input
		ev      fakeEvidence
		action  Action
		why     Why
		unknown []string
		asked   []string
		restart bool
		err     bool
	}{
		{name: "current", in: Input{Template: tmpl, Basis: "h", Want: want("h")}, action: Current},
		{name: "held before any evidence", in: Input{Template: tmpl, Basis: "old", Want: want("new", missing)}, action: Held},
		{name: "certain rolls without evidence", in: Input{Template: tmpl, Basis: "rec", Certain: true, Record: "rec", Want: want("new")}, action: Roll, why: WhyCertain, restart: false},
		{name: "certain, stamp already wanted: restart", in: Input{Template: &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{stamp.HashAnnotation: "new"}}},
			Basis: "rec", Certain: true, Record: "rec", Want: want("new")}, action: Roll, why: WhyCertain, restart: true},
		{name: "live change rolls", in: Input{Template: tmpl, Basis: "old", Want: want("new"), ChangedLive: true}, action: Roll, why: WhyLive},
		// A CronJob (no pods of its own): its stamp follows the config, without evidence
		// of times, whether it is stamped, certain or installed over.
		{name: "no pods: stamp differs, restamped", in: Input{Template: tmpl, Basis: "old", Want: want("new"), NoPods: true},
			ev: fakeEvidence{since: t0, podsOK: true, newer: false}, action: Roll, why: WhyNextRun},
		{name: "no pods: installed over, stamped", in: Input{Template: &corev1.PodTemplateSpec{}, Want: want("new"), NoPods: true},
			action: Roll, why: WhyNextRun},
		{name: "no pods: certain record of other config, restamped without restart", in: Input{Template: tmpl, Basis: "rec", Certain: true, Record: "rec", Want: want("new"), NoPods: true},
			action: Roll, why: WhyNextRun},
		{name: "no pods: stamp already the config's, recorded (no restart)", in: Input{Template: &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{stamp.HashAnnotation: "new"}}},
			Basis: "rec", Certain: true, Record: "rec", Want: want("new"), NoPods: true}, action: Record, why: WhyNextRun},
		{name: "no pods: held all the same", in: Input{Template: tmpl, Basis: "old", Want: want("new", missing), NoPods: true}, action: Held},
		{name: "stamp, config newer", in: Input{Template: tmpl, Basis: "old", Want: want("new")}, ev: fakeEvidence{since: t0, podsOK: true, newer: true},
			action: Roll, why: WhyConfigNewer, asked: []string{EvidencePods, EvidenceConfig}},
		{name: "stamp, config older", in: Input{Template: tmpl, Basis: "old", Want: want("new")}, ev: fakeEvidence{since: t0, podsOK: true},
			action: Record, why: WhyConfigOlder, asked: []string{EvidencePods, EvidenceConfig}},
		{name: "pods pending", in: Input{Template: tmpl, Basis: "old", Want: want("new")}, ev: fakeEvidence{},
			action: Record, why: WhyPodsPending, asked: []string{EvidencePods}},
		{name: "unstamped installed over: nothing else read", in: Input{Template: tmpl, Want: want("new")}, ev: fakeEvidence{since: t0, podsOK: true, newer: true},
			action: Record, why: WhyInstalledOver, asked: []string{EvidenceCoverage}},
		// Installed over (covered since t0): a source written after the coverage and at
		// or after its pods began rolls; anything else records.
		{name: "installed over, written before coverage: pods not read", in: Input{Template: tmpl, Want: want("new")},
			ev:     fakeEvidence{coveredAt: t0, since: t0.Add(-time.Hour), podsOK: true, written: t0.Add(-time.Minute)},
			action: Record, why: WhyInstalledOver, asked: []string{EvidenceCoverage, EvidenceConfig}},
		{name: "installed over, written in the coverage's second: before it", in: Input{Template: tmpl, Want: want("new")},
			ev:     fakeEvidence{coveredAt: t0.Add(300 * time.Millisecond), since: t0.Add(-time.Hour), podsOK: true, written: t0},
			action: Record, why: WhyInstalledOver, asked: []string{EvidenceCoverage, EvidenceConfig}},
		{name: "installed over, written after coverage and pods: owed", in: Input{Template: tmpl, Want: want("new")},
			ev:     fakeEvidence{coveredAt: t0, since: t0.Add(-time.Hour), podsOK: true, written: t0.Add(time.Second)},
			action: Roll, why: WhyOwed, asked: []string{EvidenceCoverage, EvidenceConfig, EvidencePods}},
		{name: "installed over, written after coverage, pods later still", in: Input{Template: tmpl, Want: want("new")},
			ev:     fakeEvidence{coveredAt: t0, since: t0.Add(time.Minute), podsOK: true, written: t0.Add(time.Second)},
			action: Record, why: WhyConfigOlder, asked: []string{EvidenceCoverage, EvidenceConfig, EvidencePods, EvidenceConfig}},
		{name: "installed over, written after coverage, at pods' second", in: Input{Template: tmpl, Want: want("new")},
			ev:     fakeEvidence{coveredAt: t0, since: t0.Add(time.Minute), podsOK: true, written: t0.Add(time.Minute)},
			action: Roll, why: WhyOwed, asked: []string{EvidenceCoverage, EvidenceConfig, EvidencePods, EvidenceConfig}},
		{name: "installed over, written after coverage, pods pending", in: Input{Template: tmpl, Want: want("new")},
			ev:     fakeEvidence{coveredAt: t0, written: t0.Add(time.Second)},
			action: Record, why: WhyPodsPending, asked: []string{EvidenceCoverage, EvidenceConfig, EvidencePods}},
		{name: "installed over, config unknown", in: Input{Template: tmpl, Want: want("new")},
			ev:     fakeEvidence{coveredAt: t0, written: t0.Add(time.Second), newerErr: ErrUnknown},
			action: Unknown, unknown: []string{EvidenceConfig}, asked: []string{EvidenceCoverage, EvidenceConfig}},
		{name: "installed over, pods unknown", in: Input{Template: tmpl, Want: want("new")},
			ev:     fakeEvidence{coveredAt: t0, written: t0.Add(time.Second), podsErr: ErrUnknown},
			action: Unknown, unknown: []string{EvidencePods}, asked: []string{EvidenceCoverage, EvidenceConfig, EvidencePods}},
		{name: "installed over, config read error", in: Input{Template: tmpl, Want: want("new")},
			ev: fakeEvidence{coveredAt: t0, written: t0.Add(time.Second), newerErr: boom}, err: true, asked: []string{EvidenceCoverage, EvidenceConfig}},
		{name: "unstamped bypassed, config newer", in: Input{Template: tmpl, Want: want("new")}, ev: fakeEvidence{bypassed: true, since: t0, podsOK: true, newer: true},
			action: Roll, why: WhyConfigNewer, asked: []string{EvidenceCoverage, EvidencePods, EvidenceConfig}},
		{name: "unstamped, roll stale: coverage not read", in: Input{Template: tmpl, Want: want("new"), RollStale: true}, ev: fakeEvidence{since: t0, podsOK: true, newer: true},
			action: Roll, why: WhyConfigNewer, asked: []string{EvidencePods, EvidenceConfig}},
		{name: "too large", in: Input{Template: full, Basis: "old", Want: want("new"), Certain: true, Record: "old"}, action: TooLarge, why: WhyCertain},
		// Unknown evidence (explain): a later known answer that records decides alone.
		{name: "coverage unknown, config older: record", in: Input{Template: tmpl, Want: want("new")}, ev: fakeEvidence{bypassedErr: ErrUnknown, since: t0, podsOK: true},
			action: Record, why: WhyConfigOlder, asked: []string{EvidenceCoverage, EvidencePods, EvidenceConfig}},
		{name: "coverage unknown, config newer: unknown", in: Input{Template: tmpl, Want: want("new")}, ev: fakeEvidence{bypassedErr: ErrUnknown, since: t0, podsOK: true, newer: true},
			action: Unknown, why: WhyConfigNewer, unknown: []string{EvidenceCoverage}, asked: []string{EvidenceCoverage, EvidencePods, EvidenceConfig}},
		{name: "pods unknown", in: Input{Template: tmpl, Basis: "old", Want: want("new")}, ev: fakeEvidence{podsErr: ErrUnknown},
			action: Unknown, unknown: []string{EvidencePods}, asked: []string{EvidencePods}},
		{name: "config unknown", in: Input{Template: tmpl, Basis: "old", Want: want("new")}, ev: fakeEvidence{since: t0, podsOK: true, newerErr: ErrUnknown},
			action: Unknown, unknown: []string{EvidenceConfig}, asked: []string{EvidencePods, EvidenceConfig}},
		// Errors (the watcher's) stop the decision.
		{name: "coverage error", in: Input{Template: tmpl, Want: want("new")}, ev: fakeEvidence{bypassedErr: boom}, err: true, asked: []string{EvidenceCoverage}},
		{name: "pods error", in: Input{Template: tmpl, Basis: "old", Want: want("new")}, ev: fakeEvidence{podsErr: boom}, err: true, asked: []string{EvidencePods}},
		{name: "config error", in: Input{Template: tmpl, Basis: "old", Want: want("new")}, ev: fakeEvidence{since: t0, podsOK: true, newerErr: boom}, err: true,
			asked: []string{EvidencePods, EvidenceConfig}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := tc.ev
			d, err := Decide(tc.in, &ev)
			if (err != nil) != tc.err {
				t.Fatalf("error %v, want error: %v", err, tc.err)
			}
			if !slices.Equal(ev.asked, tc.asked) {
				t.Errorf("asked %v, want %v", ev.asked, tc.asked)
			}
			if tc.err {
				return
			}
			if d.Action != tc.action || d.Why != tc.why || d.Restart != tc.restart || !slices.Equal(d.Unknown, tc.unknown) {
				t.Errorf("decision %+v, want action %s why %q restart %v unknown %v", d, tc.action, tc.why, tc.restart, tc.unknown)
			}
		})
	}
}

func meta(at time.Time, ann map[string]string) metav1.Object {
	return &metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(at), Annotations: ann}
}

func TestWritten(t *testing.T) {
	a := stamp.Source{Kind: stamp.KindConfigMap, Name: "a"}
	b := stamp.Source{Kind: stamp.KindConfigMap, Name: "b"}
	s := stamp.Source{Kind: stamp.KindSecret, Name: "s"}
	boom := errors.New("boom")
	old := meta(t0, nil)
	for _, tc := range []struct {
		name   string
		stored string
		metas  map[string]metav1.Object
		errs   map[string]error
		since  time.Time
		all    bool // read every source
		want   Writes
		reads  int
		err    error
	}{
		{name: "older", metas: map[string]metav1.Object{"configmap/a": old, "configmap/b": meta(t0.Add(time.Second), nil), "secret/s": old}, since: t0.Add(time.Minute),
			want: Writes{Latest: t0.Add(time.Second)}, reads: 3},
		{name: "a tie counts as newer", metas: map[string]metav1.Object{"configmap/a": old, "configmap/b": meta(t0.Add(time.Minute), nil), "secret/s": old}, since: t0.Add(time.Minute),
			all: true, want: Writes{Newer: true, Latest: t0.Add(time.Minute)}, reads: 3},
		{name: "stops at the first newer", metas: map[string]metav1.Object{"configmap/a": meta(t0.Add(time.Hour), nil), "configmap/b": meta(t0.Add(2*time.Hour), nil)},
			errs: map[string]error{"secret/s": boom}, since: t0, want: Writes{Newer: true, Latest: t0.Add(time.Hour)}, reads: 1},
		{name: "all: reads past the first newer, an error stops", metas: map[string]metav1.Object{"configmap/a": meta(t0.Add(time.Hour), nil), "configmap/b": meta(t0.Add(2*time.Hour), nil)},
			errs: map[string]error{"secret/s": boom}, since: t0, all: true, reads: 3, err: boom},
		{name: "ignored source gives no evidence", metas: map[string]metav1.Object{"configmap/a": meta(t0.Add(time.Hour), map[string]string{stamp.IgnoreAnnotation: "true"}), "configmap/b": old, "secret/s": old},
			since: t0.Add(time.Minute), want: Writes{Latest: t0}, reads: 3},
		{name: "deleted since the stamp", stored: "configmap/a=abc,configmap/b=def", metas: map[string]metav1.Object{"configmap/b": old, "secret/s": old}, since: t0.Add(time.Minute),
			all: true, want: Writes{Newer: true, Deleted: true, Latest: t0}, reads: 3},
		{name: "missing in the stamp too", stored: "configmap/a=missing,configmap/b=def", metas: map[string]metav1.Object{"configmap/b": old, "secret/s": old}, since: t0.Add(time.Minute),
			want: Writes{Latest: t0}, reads: 3},
		{name: "missing, not in the stamp (Secrets were off)", stored: "configmap/a=abc,configmap/b=def", metas: map[string]metav1.Object{"configmap/a": old, "configmap/b": old},
			since: t0.Add(time.Minute), want: Writes{Latest: t0}, reads: 3},
		{name: "unknown, none newer", metas: map[string]metav1.Object{"configmap/a": old, "secret/s": old}, errs: map[string]error{"configmap/b": ErrUnknown}, since: t0.Add(time.Minute),
			want: Writes{Latest: t0}, reads: 3, err: ErrUnknown},
		{name: "unknown, one newer", metas: map[string]metav1.Object{"configmap/b": meta(t0.Add(time.Hour), nil), "secret/s": old}, errs: map[string]error{"configmap/a": ErrUnknown}, since: t0.Add(time.Minute),
			all: true, want: Writes{Newer: true, Latest: t0.Add(time.Hour)}, reads: 3},
		{name: "error stops", metas: map[string]metav1.Object{"configmap/a": old}, errs: map[string]error{"configmap/b": boom}, since: t0.Add(time.Minute),
			reads: 2, err: boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reads := 0
			got, err := Written([]stamp.Source{a, b, s}, tc.stored, tc.since, tc.all, func(src stamp.Source) (metav1.Object, error) {
				reads++
				if err := tc.errs[src.ID()]; err != nil {
					return nil, err
				}
				m, ok := tc.metas[src.ID()]
				if !ok {
					return nil, nil
				}
				return m, nil
			})
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if reads != tc.reads {
				t.Errorf("%d reads, want %d", reads, tc.reads)
			}
			if !errors.Is(tc.err, boom) && got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A required source never written since it was created, no later than the pods of the
// current template began (since), has had one content for all of them: no evidence, even
// at a tie of the times.
func TestWrittenOneContent(t *testing.T) {
	req := stamp.Source{Kind: stamp.KindConfigMap, Name: "a", Required: true}
	opt := stamp.Source{Kind: stamp.KindConfigMap, Name: "a"}
	written := func(born, last time.Time) metav1.Object {
		return &metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(born),
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Time: &metav1.Time{Time: last}}}}
	}
	for _, tc := range []struct {
		name  string
		src   stamp.Source
		m     metav1.Object
		since time.Time
		newer bool
	}{
		{"required, created with the pods' ReplicaSet, never written since", req, written(t0, t0), t0, false},
		{"required, created after the pods began (adopted ReplicaSet, re-created source)", req, written(t0.Add(time.Second), t0.Add(time.Second)), t0, true},
		{"required, written since its creation", req, written(t0, t0.Add(time.Second)), t0, true},
		{"optional: its pods may have started without it", opt, written(t0, t0), t0, true},
		{"required, older than the pods and unwritten: no evidence by any rule", req, written(t0.Add(-time.Hour), t0.Add(-time.Hour)), t0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Written([]stamp.Source{tc.src}, "", tc.since, false, func(stamp.Source) (metav1.Object, error) { return tc.m, nil })
			if err != nil || got.Newer != tc.newer {
				t.Fatalf("newer %v (%v), want %v", got.Newer, err, tc.newer)
			}
		})
	}
}

func TestCreatedCovered(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		created, kind, secrets, ns time.Time
		hasSecrets                 bool
		want                       bool
	}{
		{name: "after coverage and namespace", created: t0.Add(time.Minute), kind: t0, ns: t0, want: true},
		{name: "kind not covered", created: t0.Add(time.Minute), ns: t0},
		{name: "tie with coverage predates", created: t0, kind: t0, ns: t0.Add(-time.Hour)},
		{name: "tie with namespace counts as after", created: t0.Add(time.Minute), kind: t0, ns: t0.Add(time.Minute), want: true},
		{name: "before the namespace's last write", created: t0.Add(time.Minute), kind: t0, ns: t0.Add(time.Hour)},
		{name: "Secrets not covered", created: t0.Add(time.Minute), kind: t0, ns: t0, hasSecrets: true},
		{name: "before Secrets were covered", created: t0.Add(time.Minute), kind: t0, secrets: t0.Add(time.Hour), ns: t0, hasSecrets: true},
		{name: "after Secrets were covered", created: t0.Add(2 * time.Hour), kind: t0, secrets: t0.Add(time.Hour), ns: t0, hasSecrets: true, want: true},
		{name: "Secrets coverage irrelevant without a Secret", created: t0.Add(time.Minute), kind: t0, ns: t0, want: true},
	} {
		if got := CreatedCovered(tc.created, tc.kind, tc.secrets, tc.hasSecrets, tc.ns); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestCovered(t *testing.T) {
	boom := errors.New("boom")
	cms := []stamp.Source{{Kind: stamp.KindConfigMap, Name: "app"}}
	withSecret := append(slices.Clone(cms), stamp.Source{Kind: stamp.KindSecret, Name: "db"})
	ns := &metav1.ObjectMeta{Name: "ns", CreationTimestamp: metav1.NewTime(t0)}
	later := t0.Add(time.Minute)
	nsLabelled := &metav1.ObjectMeta{Name: "ns", CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour)),
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Time: &metav1.Time{Time: t0.Add(time.Hour)}}}}
	obj := func(created, written time.Time) metav1.Object {
		m := &metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}
		if !written.IsZero() {
			m.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Time: &metav1.Time{Time: written}}}
		}
		return m
	}
	for _, tc := range []struct {
		name          string
		obj           metav1.Object
		refs          []stamp.Source
		kind, secrets time.Time
		scope         time.Time
		ns            metav1.Object
		included      bool
		nsErr         error
		want          Coverage
		wantNamespace bool
		wantErr       error
	}{
		{name: "created after coverage and its namespace's opt-in", obj: obj(later, time.Time{}), refs: cms, kind: t0, ns: ns, included: true,
			want: Coverage{Bypassed: true, Since: t0}, wantNamespace: true},
		{name: "kind not covered: known without the namespace", obj: obj(later, time.Time{}), refs: cms, nsErr: boom},
		{name: "a Secret, Secrets not covered: known without the namespace", obj: obj(later, time.Time{}), refs: withSecret, kind: t0, nsErr: boom},
		{name: "a Secret, Secrets covered", obj: obj(later, time.Time{}), refs: withSecret, kind: t0, secrets: t0, ns: ns, included: true,
			want: Coverage{Bypassed: true, Since: t0}, wantNamespace: true},
		{name: "a Secret, created before Secrets were covered", obj: obj(later, time.Time{}), refs: withSecret, kind: t0, secrets: t0.Add(time.Hour), ns: ns, included: true,
			want: Coverage{Since: t0.Add(time.Hour)}, wantNamespace: true},
		{name: "created before coverage", obj: obj(t0.Add(-time.Minute), time.Time{}), refs: cms, kind: t0, ns: ns, included: true,
			want: Coverage{Since: t0}, wantNamespace: true},
		{name: "namespace opted in after coverage: since its last write", obj: obj(t0.Add(-2*time.Hour), time.Time{}), refs: cms, kind: t0, ns: nsLabelled, included: true,
			want: Coverage{Since: t0.Add(time.Hour)}, wantNamespace: true},
		{name: "opted in by its own label alone: since its own last write", obj: obj(t0.Add(-time.Hour), later), refs: cms, kind: t0, ns: ns,
			want: Coverage{Since: later}, wantNamespace: true},
		{name: "no namespace", obj: obj(later, time.Time{}), refs: cms, kind: t0, included: true, want: Coverage{Since: later}, wantNamespace: true},
		{name: "namespace not read", obj: obj(later, time.Time{}), refs: cms, kind: t0, nsErr: boom, wantNamespace: true, wantErr: boom},
		// configstamp's scope changed (a namespace excluded no longer): no earlier than
		// that, whatever its namespace's last write; created before it, not bypassed.
		{name: "included by a change of scope: since the change", obj: obj(t0.Add(-2*time.Hour), time.Time{}), refs: cms, kind: t0, scope: t0.Add(3 * time.Hour), ns: ns, included: true,
			want: Coverage{Since: t0.Add(3 * time.Hour)}, wantNamespace: true},
		{name: "created before a change of scope: installed over", obj: obj(later, time.Time{}), refs: cms, kind: t0, scope: t0.Add(time.Hour), ns: ns, included: true,
			want: Coverage{Since: t0.Add(time.Hour)}, wantNamespace: true},
		{name: "created after a change of scope: bypassed", obj: obj(t0.Add(2*time.Hour), time.Time{}), refs: cms, kind: t0, scope: t0.Add(time.Hour), ns: ns, included: true,
			want: Coverage{Bypassed: true, Since: t0.Add(time.Hour)}, wantNamespace: true},
	} {
		asked := false
		got, err := Covered(tc.obj, tc.refs, tc.kind, tc.secrets, tc.scope, func() (metav1.Object, bool, error) {
			asked = true
			return tc.ns, tc.included, tc.nsErr
		})
		if got.Bypassed != tc.want.Bypassed || !got.Since.Equal(tc.want.Since) || !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) || asked != tc.wantNamespace {
			t.Errorf("%s: %+v, %v (namespace read %v), want %+v, %v (%v)", tc.name, got, err, asked, tc.want, tc.wantErr, tc.wantNamespace)
		}
	}
}

func TestWrittenAfter(t *testing.T) {
	for at, want := range map[time.Time]time.Time{
		t0:                             t0.Add(time.Second),
		t0.Add(999 * time.Millisecond): t0.Add(time.Second),
	} {
		if got := WrittenAfter(at); !got.Equal(want) {
			t.Errorf("WrittenAfter(%v) = %v, want %v", at, got, want)
		}
	}
}

func TestCoveredSince(t *testing.T) {
	entries := map[string]time.Time{"statefulsets": t0.Add(-time.Hour), "daemonsets": t0.Add(time.Hour), CoverageSecrets: t0.Add(2 * time.Hour)}
	for key, want := range map[string]time.Time{
		"deployments":   t0,                    // since the registration's creation, entry or not
		"statefulsets":  t0,                    // never before the registration
		"daemonsets":    t0.Add(time.Hour),     // its entry
		CoverageSecrets: t0.Add(2 * time.Hour), // its entry
		"rollouts":      {},                    // not covered
	} {
		if got := CoveredSince(t0, entries, key); !got.Equal(want) {
			t.Errorf("%s: got %v, want %v", key, got, want)
		}
	}
}

func TestCoverageScope(t *testing.T) {
	a := CoverageScope("configstamp.io/inject", []string{"kube-system", "team-a"})
	switch {
	case !IsCoverageScope(a) || IsCoverageScope("statefulsets"):
		t.Errorf("IsCoverageScope(%q)", a)
	case a != CoverageScope("configstamp.io/inject", []string{"team-a", "kube-system"}):
		t.Error("the order of the excluded namespaces changes the key")
	case a == CoverageScope("configstamp.io/inject", []string{"kube-system"}), a == CoverageScope("other/label", []string{"kube-system", "team-a"}):
		t.Error("another scope, the same key")
	}
	if got := ScopeSince(map[string]time.Time{"statefulsets": t0.Add(time.Hour), a: t0}); !got.Equal(t0) {
		t.Errorf("ScopeSince = %v, want %v", got, t0)
	}
	if got := ScopeSince(map[string]time.Time{"statefulsets": t0}); !got.IsZero() {
		t.Errorf("ScopeSince without a scope entry = %v", got)
	}
}
