package webhook

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/internal/argo"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// planNow is the restart time the plan table's inputs give.
var planNow = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// stampOf is the stamp of ConfigMap "cfg" as config holds it (absent: missing).
func stampOf(t *testing.T, config map[string]string) stamp.Stamp {
	st, err := stamp.Compute(context.Background(), []stamp.Source{{Kind: stamp.KindConfigMap, Name: "cfg", AllKeys: true}}, lookupIn(config), testNSKey)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// lookupIn reads ConfigMaps holding k=v from config (name: v).
func lookupIn(config map[string]string) stamp.Lookup {
	return func(_ context.Context, _, name string) (*corev1.ConfigMap, error) {
		v, ok := config[name]
		if !ok {
			return nil, nil
		}
		return cm(name, v), nil
	}
}

// recordOf is the record of hash for d's template.
func recordOf(d *appsv1.Deployment, hash string) string {
	return stamp.Observed{Hash: hash, Template: stamp.TemplateFingerprint(&d.Spec.Template)}.String()
}

// annotated is d with its metadata annotation key set to v.
func annotated(d *appsv1.Deployment, key, v string) *appsv1.Deployment {
	d = d.DeepCopy()
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	d.Annotations[key] = v
	return d
}

// marked is d carrying the watcher's marker.
func marked(d *appsv1.Deployment, marker string) *appsv1.Deployment {
	return annotated(d, stamp.NudgeAnnotation, marker)
}

func withAnnotations(d *appsv1.Deployment, m map[string]string) *appsv1.Deployment {
	d = d.DeepCopy()
	d.Annotations = m
	return d
}

func restartedStamp(st stamp.Stamp, at string) map[string]string {
	m := stamped(st)
	m[stamp.RestartedAnnotation] = at
	return m
}

// The admission of each kind of update, as a plan: what it reads, strips, writes, warns,
// logs and counts as.
func TestPlan(t *testing.T) {
	cur, old := expected(t, "1"), expected(t, "2")
	missing := stampOf(t, nil)
	one := map[string]string{"cfg": "1"}
	boom := errors.New("etcdserver: request timed out")
	const self = "system:serviceaccount:configstamp-system:configstamp"

	plain := dep(nil, "img", "cfg")
	stale := dep(stamped(old), "img", "cfg")
	staleRec := withRecord(dep(stamped(old), "img", "cfg"), "img", old.Hash)
	current := withRecord(dep(stamped(cur), "img", "cfg"), "img", cur.Hash)
	podsRunCur := withRecord(dep(stamped(old), "img", "cfg"), "img", cur.Hash) // the config changed back
	podsRunOld := withRecord(dep(stamped(cur), "img", "cfg"), "img", old.Hash) // the stamp is current, the pods are not
	fullRunsOld := withRecord(dep(full(stamped(cur), 30), "img", "cfg"), "img", old.Hash)
	cause := func(d *appsv1.Deployment, v string) *appsv1.Deployment {
		return annotated(d, stamp.ChangeCauseAnnotation, v)
	}
	ownCause := stamp.ChangeCause(stamp.Rollout{StoredHash: old.Hash, StoredSources: old.SourcesAnnotation(), Hash: cur.Hash, Sources: cur.SourcesAnnotation()})
	labelled := func(d *appsv1.Deployment) *appsv1.Deployment {
		d = d.DeepCopy()
		d.Labels = map[string]string{"team": "x"}
		return d
	}
	fullMeta := func(d *appsv1.Deployment) *appsv1.Deployment { return withAnnotations(d, full(d.Annotations, 20)) }
	rollout := &argo.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app"}, Spec: argo.RolloutSpec{Template: cmTemplate()}}

	for _, tc := range []struct {
		name string
		kind *workload.Kind // default Deployment
		obj  client.Object
		old  client.Object // nil: a CREATE
		raw  string        // the object's JSON instead of obj's
		user string        // the request's user; Self is set when it is
		// config is what the read finds (name: k's value; absent: missing); err fails it.
		config map[string]string
		err    error

		reads    int
		result   string
		strip    []string
		template map[string]string
		metadata map[string]string
		warnings []string // each a prefix of the warning in its place
		logs     []string
		omitted  bool
		audit    string // the audit annotation's hash
	}{
		{name: "create: stamped, with its record", obj: plain, config: one,
			reads: 1, result: resultStamped, template: stamped(cur), metadata: map[string]string{stamp.ObservedAnnotation: recordOf(plain, cur.Hash)},
			logs: []string{"Stamped config hash"}, audit: cur.Hash},
		{name: "create, config unreadable: admitted as it came, warned", obj: plain, err: boom,
			reads: 1, result: resultReadError, metadata: map[string]string{stamp.ObservedAnnotation: ""},
			warnings: []string{stamp.WarningUnreadConfig + "; the Deployment keeps its stored config hash (none)"},
			logs:     []string{"Admitted with the stored config hash: could not read config"}},
		{name: "create with missing config: stamped, warned", obj: plain,
			reads: 1, result: resultStamped, template: stamped(missing), metadata: map[string]string{stamp.ObservedAnnotation: recordOf(plain, missing.Hash)},
			warnings: []string{"configstamp: required config is missing, the new pods cannot start until it exists: configmap/cfg is missing"},
			logs:     []string{"Stamped config hash"}, audit: missing.Hash},
		{name: "someone's update of a recorded workload that keeps the template: as stored, nothing read", obj: labelled(staleRec), old: staleRec, config: one,
			result: resultSkipped, template: stamped(old), metadata: map[string]string{stamp.ObservedAnnotation: staleRec.Annotations[stamp.ObservedAnnotation]}},
		{name: "someone's no-op update of an unstamped workload: left alone, nothing read", obj: labelled(plain), old: plain, config: one,
			result: resultSkipped, metadata: map[string]string{stamp.ObservedAnnotation: ""}},
		{name: "a stamp without a record for want of room: treated as recorded, nothing read", obj: labelled(fullMeta(stale)), old: fullMeta(stale), config: one,
			result: resultSkipped, template: stamped(old), metadata: map[string]string{stamp.ObservedAnnotation: ""}},
		{name: "a stamp without a record, with room: stamped", obj: labelled(stale), old: stale, config: one,
			reads: 1, result: resultStamped, template: stamped(cur), metadata: map[string]string{stamp.ObservedAnnotation: recordOf(stale, cur.Hash)},
			logs: []string{"Stamped config hash"}, audit: cur.Hash},
		{name: "reinvocation after its own patch: kept, read once", obj: labelled(current), old: staleRec, config: one,
			reads: 1, result: resultSkipped},
		{name: "reinvocation, config unreadable: the stored stamp and record back, warned", obj: labelled(current), old: staleRec, err: boom,
			reads: 1, result: resultReadError, template: stamped(old), metadata: map[string]string{stamp.ObservedAnnotation: staleRec.Annotations[stamp.ObservedAnnotation]},
			warnings: []string{stamp.WarningUnreadConfig}, logs: []string{"Admitted with the stored config hash: could not read config"}},
		{name: "a foreign stamp and record while the config says otherwise: the stored ones back", obj: labelled(current), old: staleRec, config: map[string]string{"cfg": "3"},
			reads: 1, result: resultSkipped, template: stamped(old), metadata: map[string]string{stamp.ObservedAnnotation: staleRec.Annotations[stamp.ObservedAnnotation]}},
		{name: "nudge: stamped, the marker stripped, the cause says why", obj: marked(staleRec, stamp.NudgeValue), old: staleRec, config: one,
			reads: 1, result: resultStamped, strip: []string{stamp.NudgeAnnotation}, template: stamped(cur),
			metadata: map[string]string{stamp.ObservedAnnotation: recordOf(staleRec, cur.Hash), stamp.ChangeCauseAnnotation: ownCause},
			logs:     []string{"Stamped config hash"}, audit: cur.Hash},
		{name: "nudge of a current workload: unchanged, no cause", obj: marked(current, stamp.NudgeValue), old: current, config: one,
			reads: 1, result: resultUnchanged, strip: []string{stamp.NudgeAnnotation}, template: stamped(cur),
			metadata: map[string]string{stamp.ObservedAnnotation: recordOf(current, cur.Hash)}, audit: cur.Hash},
		{name: "nudge into missing config: held", obj: marked(staleRec, stamp.NudgeValue), old: staleRec,
			reads: 1, result: resultHeld, strip: []string{stamp.NudgeAnnotation}, template: stamped(old),
			metadata: map[string]string{stamp.ObservedAnnotation: staleRec.Annotations[stamp.ObservedAnnotation]},
			warnings: []string{"configstamp: kept the stored config hash, not rolling into missing config: configmap/cfg is missing"},
			logs:     []string{"Kept the stored config hash: required config is missing"}},
		{name: "a new template into missing config: stamped all the same, warned", obj: dep(stamped(old), "img:2", "cfg"), old: stale,
			reads: 1, result: resultStamped, template: stamped(missing), metadata: map[string]string{stamp.ObservedAnnotation: recordOf(dep(nil, "img:2", "cfg"), missing.Hash)},
			warnings: []string{"configstamp: required config is missing"}, logs: []string{"Stamped config hash"}, audit: missing.Hash},
		{name: "nudge that finds the config as the pods run it: kept (changed back)", obj: marked(podsRunCur, stamp.NudgeValue), old: podsRunCur, config: one,
			reads: 1, result: resultUnchanged, strip: []string{stamp.NudgeAnnotation}, template: stamped(old),
			metadata: map[string]string{stamp.ObservedAnnotation: podsRunCur.Annotations[stamp.ObservedAnnotation]},
			logs:     []string{"Kept the stored config hash: the pods run the config as it is now (their record)"}},
		{name: "nudge of a current stamp whose pods run other config: restarted", obj: marked(podsRunOld, stamp.NudgeValue), old: podsRunOld, config: one,
			reads: 1, result: resultStamped, strip: []string{stamp.NudgeAnnotation}, template: restartedStamp(cur, "2026-12-01T10:00:00Z"),
			metadata: map[string]string{stamp.ObservedAnnotation: recordOf(podsRunOld, cur.Hash),
				stamp.ChangeCauseAnnotation: stamp.ChangeCause(stamp.Rollout{StoredHash: cur.Hash, StoredSources: cur.SourcesAnnotation(), Hash: cur.Hash,
					Sources: cur.SourcesAnnotation(), Ran: old.Hash, Restart: true})},
			logs: []string{"Stamped config hash"}, audit: cur.Hash},
		{name: "a full template: left unstamped", obj: dep(full(nil, 20), "img", "cfg"), config: one,
			reads: 1, result: resultTooLarge, template: unstamped(), metadata: map[string]string{stamp.ObservedAnnotation: ""},
			warnings: []string{"configstamp: not stamped: its stamp would take the Deployment's pod template annotations past"},
			logs:     []string{"Left unstamped: the stamp would exceed the pod template's annotation size limit"}},
		{name: "a nudge whose restart does not fit: what is stored stays", obj: marked(fullRunsOld, stamp.NudgeValue), old: fullRunsOld, config: one,
			reads: 1, result: resultTooLarge, strip: []string{stamp.NudgeAnnotation}, template: stamped(cur),
			metadata: map[string]string{stamp.ObservedAnnotation: fullRunsOld.Annotations[stamp.ObservedAnnotation]},
			warnings: []string{"configstamp: not stamped"}, logs: []string{"Left unstamped: the stamp would exceed the pod template's annotation size limit"}},
		{name: "full metadata: stamped without a record", obj: fullMeta(plain), config: one,
			reads: 1, result: resultStamped, template: stamped(cur), metadata: map[string]string{stamp.ObservedAnnotation: ""},
			warnings: []string{"configstamp: stamped without its record of the config the pods run: the Deployment's annotations are near"},
			logs:     []string{"Stamped without a record: it would exceed the annotation size limit", "Stamped config hash"}, omitted: true, audit: cur.Hash},
		{name: "someone's rollout that kept configstamp's earlier cause: the cause goes", obj: cause(dep(stamped(old), "img:2", "cfg"), ownCause), old: cause(stale, ownCause), config: one,
			reads: 1, result: resultStamped, strip: []string{stamp.ChangeCauseAnnotation}, template: stamped(cur),
			metadata: map[string]string{stamp.ObservedAnnotation: recordOf(dep(nil, "img:2", "cfg"), cur.Hash)}, logs: []string{"Stamped config hash"}, audit: cur.Hash},
		{name: "someone's rollout with a cause of their own: kept", obj: cause(dep(stamped(old), "img:2", "cfg"), "image 2"), old: cause(stale, ownCause), config: one,
			reads: 1, result: resultStamped, template: stamped(cur),
			metadata: map[string]string{stamp.ObservedAnnotation: recordOf(dep(nil, "img:2", "cfg"), cur.Hash)}, logs: []string{"Stamped config hash"}, audit: cur.Hash},
		{name: "someone else's marker: stripped and ignored", obj: marked(withAnnotations(current, map[string]string{stamp.ObservedAnnotation: recordOf(current, strings.Repeat("1", 64))}), stamp.NudgeRecord),
			old: current, user: "alice", config: one,
			reads: 1, result: resultSkipped, strip: []string{stamp.NudgeAnnotation}, template: stamped(cur), metadata: map[string]string{stamp.ObservedAnnotation: current.Annotations[stamp.ObservedAnnotation]}},
		{name: "configstamp's write of a record: kept as written, nothing read", obj: marked(withRecord(dep(nil, "img", "cfg"), "img", cur.Hash), stamp.NudgeRecord), old: plain, user: self, config: one,
			result: resultSkipped, strip: []string{stamp.NudgeAnnotation}, metadata: map[string]string{stamp.ObservedAnnotation: recordOf(plain, cur.Hash)}},
		{name: "skipped: only the marker goes", obj: marked(withAnnotations(plain, map[string]string{stamp.SkipAnnotation: "true"}), stamp.NudgeValue), old: plain, config: one,
			result: resultSkipped, strip: []string{stamp.NudgeAnnotation}},
		{name: "malformed extra sources: warned, the others count", obj: withAnnotations(dep(nil, "img"), map[string]string{stamp.ExtraSourcesAnnotation: "configmap/cfg, bogus"}), config: one,
			reads: 1, result: resultStamped, template: stamped(cur), metadata: map[string]string{stamp.ObservedAnnotation: recordOf(dep(nil, "img"), cur.Hash)},
			warnings: []string{`configstamp: ignored entries of configstamp.io/extra-sources: "bogus"`}, logs: []string{"Stamped config hash"}, audit: cur.Hash},
		{name: "no config any more: the stamp and record go", obj: dep(stamped(cur), "img"), old: current, config: one,
			reads: 1, result: resultStamped, template: map[string]string{stamp.HashAnnotation: "", stamp.SourcesAnnotation: ""}, metadata: map[string]string{stamp.ObservedAnnotation: ""},
			logs: []string{"Stamped config hash"}},
		{name: "a Rollout: stamped like a Deployment", kind: workload.Rollout, obj: rollout, config: one,
			reads: 1, result: resultStamped, template: stamped(cur), metadata: map[string]string{stamp.ObservedAnnotation: recordOf(plain, cur.Hash)},
			logs: []string{"Stamped config hash"}, audit: cur.Hash},
		{name: "a Rollout whose template does not decode: left alone, warned", kind: workload.Rollout, config: one,
			raw:    `{"metadata":{"name":"app","namespace":"ns"},"spec":{"template":{"spec":{"volumes":[{"name":"v","configMap":{"name":"cfg","defaultMode":"0644"}}]}}}}`,
			result: resultSkipped, warnings: []string{"configstamp: not stamped: its pod template does not decode as a pod template: "},
			logs: []string{"Left alone: its pod template does not decode"}},
		{name: "a Rollout that runs a Deployment's template: left alone", kind: workload.Rollout, config: one,
			obj:    &argo.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app"}, Spec: argo.RolloutSpec{WorkloadRef: &argo.WorkloadRef{Kind: "Deployment", Name: "app"}}},
			result: resultSkipped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind := tc.kind
			if kind == nil {
				kind = workload.Deployment
			}
			op := admissionv1.Create
			if tc.old != nil {
				op = admissionv1.Update
			}
			req := review(t, kind, op, tc.obj, tc.old)
			if tc.raw != "" {
				req.Object.Raw = []byte(tc.raw)
			}
			s := &Stamper{}
			if tc.user != "" {
				s.Self, req.UserInfo.Username = self, tc.user
			}
			in, bad := decodeInput(s, kind, req)
			if bad != nil {
				t.Fatal(bad)
			}
			in.now = planNow
			reads := 0
			p := in.plan(func() (stamp.Stamp, error) {
				reads++
				if tc.err != nil {
					return stamp.Stamp{}, tc.err
				}
				return stamp.Compute(context.Background(), in.srcs, lookupIn(tc.config), testNSKey)
			}, nil)
			if reads != tc.reads {
				t.Errorf("read config %d times, want %d", reads, tc.reads)
			}
			if p.result != tc.result {
				t.Errorf("result %q, want %q", p.result, tc.result)
			}
			if !slices.Equal(p.strip, tc.strip) {
				t.Errorf("stripped %q, want %q", p.strip, tc.strip)
			}
			if !maps.Equal(p.template, tc.template) || (p.template == nil) != (tc.template == nil) {
				t.Errorf("template %q, want %q", p.template, tc.template)
			}
			if !maps.Equal(p.metadata, tc.metadata) || (p.metadata == nil) != (tc.metadata == nil) {
				t.Errorf("metadata %q, want %q", p.metadata, tc.metadata)
			}
			if len(p.warnings) != len(tc.warnings) {
				t.Errorf("warnings %q, want %q", p.warnings, tc.warnings)
			}
			for i := range min(len(p.warnings), len(tc.warnings)) {
				if !strings.HasPrefix(p.warnings[i], tc.warnings[i]) {
					t.Errorf("warning %q, want one starting %q", p.warnings[i], tc.warnings[i])
				}
			}
			var logs []string
			for _, l := range p.logs {
				logs = append(logs, l.msg)
			}
			if !slices.Equal(logs, tc.logs) {
				t.Errorf("logs %q, want %q", logs, tc.logs)
			}
			if p.recordOmitted != tc.omitted {
				t.Errorf("record omitted: %v, want %v", p.recordOmitted, tc.omitted)
			}
			if got := p.audit[AuditHash]; got != tc.audit || (tc.audit != "" && p.audit[AuditSources] == "") {
				t.Errorf("audit %v, want hash %q", p.audit, tc.audit)
			}
		})
	}
}

// decodeInput decodes req as the handler does.
func decodeInput(s *Stamper, kind *workload.Kind, req admission.Request) (*input, *undecodable) {
	obj, old, bad := decodeReview(kind, req)
	if bad != nil {
		return nil, bad
	}
	return s.input(kind, req, obj, old, nil), nil
}
