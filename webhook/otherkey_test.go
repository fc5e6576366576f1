package webhook

import (
	"context"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// A nudge names the key its watcher computed under. The webhook, holding another key,
// reads its own again (it may be the stale one): under the nudge's key it stamps as
// ever; still under another, or unable to read it now, it keeps the stored stamp (no
// rollout under each key in turn) and says other_key. A nudge naming no key (an older
// watcher's, which may digest with an older encoding) is kept the same way, without
// reading the key; a real update is stamped as today.
func TestPlanNudgeUnderAnotherKey(t *testing.T) {
	const self = "system:serviceaccount:configstamp-system:configstamp"
	ours, theirs := testKey(), []byte("fedcba9876543210fedcba9876543210")
	oursFP, theirsFP := stamp.KeyFingerprint(ours), stamp.KeyFingerprint(theirs)
	under := func(key []byte) stamp.Stamp { return cfgStampUnder(t, key) }
	old := expected(t, "2")
	staleRec := withRecord(dep(stamped(old), "img", "cfg"), "img", old.Hash)
	keptRecord := map[string]string{stamp.ObservedAnnotation: staleRec.Annotations[stamp.ObservedAnnotation]}
	recordUnder := func(key []byte) map[string]string {
		st := under(key)
		return map[string]string{stamp.ObservedAnnotation: stamp.Observed{Hash: st.Hash, Template: stamp.TemplateFingerprint(&staleRec.Spec.Template), Key: st.Key}.String()}
	}
	newImage := dep(stamped(old), "img:2", "cfg")

	for _, tc := range []struct {
		name string
		obj  *appsv1.Deployment
		// reread is the key a read of the Secret finds (nil: it cannot be read now).
		reread []byte

		reads, keyReads int
		result          string
		template        map[string]string
		metadata        map[string]string
		warning         string
	}{
		{name: "nudge under our key: stamped, its record names the key", obj: marked(staleRec, stamp.NudgeFor(oursFP)), reread: ours,
			reads: 1, result: resultStamped, template: stamped(under(ours)), metadata: recordUnder(ours)},
		{name: "nudge under another key, ours read again: kept, other_key", obj: marked(staleRec, stamp.NudgeFor(theirsFP)), reread: ours,
			reads: 1, keyReads: 1, result: resultOtherKey, template: stamped(old), metadata: keptRecord, warning: stamp.WarningOtherKey},
		{name: "nudge under another key, the key not readable now: kept, other_key", obj: marked(staleRec, stamp.NudgeFor(theirsFP)),
			reads: 1, keyReads: 1, result: resultOtherKey, template: stamped(old), metadata: keptRecord, warning: stamp.WarningOtherKey},
		{name: "nudge under the key read again (ours was stale): stamped under it", obj: marked(staleRec, stamp.NudgeFor(theirsFP)), reread: theirs,
			reads: 2, keyReads: 1, result: resultStamped, template: stamped(under(theirs)), metadata: recordUnder(theirs)},
		{name: "nudge naming no key (an older watcher's, maybe of another encoding): kept, other_key, the key not read", obj: marked(staleRec, stamp.NudgeValue), reread: ours,
			reads: 1, result: resultOtherKey, template: stamped(old), metadata: keptRecord, warning: stamp.WarningOtherKey},
		{name: "a new template carrying a nudge under another key: stamped, the key not read", obj: marked(newImage, stamp.NudgeFor(theirsFP)), reread: ours,
			reads: 1, result: resultStamped, template: stamped(under(ours))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := review(t, workload.Deployment, admissionv1.Update, tc.obj, staleRec)
			req.UserInfo.Username = self
			in, bad := decodeInput(&Stamper{Self: self}, workload.Deployment, req)
			if bad != nil {
				t.Fatal(bad)
			}
			current := ours
			reads, keyReads := 0, 0
			p := in.plan(func() (stamp.Stamp, error) {
				reads++
				return under(current), nil
			}, func() (string, bool) {
				keyReads++
				if tc.reread == nil {
					return "", false
				}
				current = tc.reread
				return stamp.KeyFingerprint(current), true
			})
			if reads != tc.reads || keyReads != tc.keyReads {
				t.Errorf("read config %d times and the key %d, want %d and %d", reads, keyReads, tc.reads, tc.keyReads)
			}
			if p.result != tc.result {
				t.Errorf("result %q, want %q", p.result, tc.result)
			}
			if !equalMaps(p.template, tc.template) {
				t.Errorf("template %q, want %q", p.template, tc.template)
			}
			if got, want := p.metadata[stamp.ObservedAnnotation], tc.metadata[stamp.ObservedAnnotation]; tc.metadata != nil && got != want {
				t.Errorf("record %q, want %q", got, want)
			}
			var warned bool
			for _, w := range p.warnings {
				warned = warned || tc.warning != "" && strings.HasPrefix(w, tc.warning)
			}
			if warned != (tc.warning != "") {
				t.Errorf("warnings %q, want one starting %q", p.warnings, tc.warning)
			}
			if tc.result == resultOtherKey && p.audit[AuditOtherKey] == "" {
				t.Errorf("audit %v, want %s", p.audit, AuditOtherKey)
			}
		})
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestPlanResume: resuming a paused Deployment is stamped like a nudge, with the config
// current now (one rollout onto it); unless the record names another key than this
// replica holds, even after reading it again: then it is kept as stored (the watcher
// rolls it under the current key), not stamped under a stale one and rolled twice.
func TestPlanResume(t *testing.T) {
	ours, theirs := testKey(), []byte("fedcba9876543210fedcba9876543210")
	under := func(key []byte) stamp.Stamp { return cfgStampUnder(t, key) }
	old := expected(t, "2")
	for _, tc := range []struct {
		name      string
		recordKey []byte
		result    string
		template  map[string]string
	}{
		{"record under our key: stamped with the config current now", ours, resultStamped, stamped(under(ours))},
		{"record under another key: kept as stored", theirs, resultOtherKey, stamped(old)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			paused := dep(stamped(old), "img", "cfg")
			rec := stamp.Observed{Hash: old.Hash, Template: stamp.TemplateFingerprint(&paused.Spec.Template), Key: stamp.KeyFingerprint(tc.recordKey)}
			paused.Annotations = map[string]string{stamp.ObservedAnnotation: rec.String()}
			paused.Spec.Paused = true
			resumed := paused.DeepCopy()
			resumed.Spec.Paused = false
			req := review(t, workload.Deployment, admissionv1.Update, resumed, paused)
			req.UserInfo.Username = "alice"
			in, bad := decodeInput(&Stamper{Self: "system:serviceaccount:configstamp-system:configstamp"}, workload.Deployment, req)
			if bad != nil {
				t.Fatal(bad)
			}
			p := in.plan(func() (stamp.Stamp, error) { return under(ours), nil }, func() (string, bool) { return stamp.KeyFingerprint(ours), true })
			if p.result != tc.result || !equalMaps(p.template, tc.template) {
				t.Errorf("result %q template %q, want %q %q", p.result, p.template, tc.result, tc.template)
			}
		})
	}
}

// cfgStampUnder is the stamp of ConfigMap cfg (k=1, all keys) in namespace ns under key.
func cfgStampUnder(t *testing.T, key []byte) stamp.Stamp {
	t.Helper()
	st, err := stamp.Compute(context.Background(), []stamp.Source{{Kind: stamp.KindConfigMap, Name: "cfg", AllKeys: true}},
		lookupIn(map[string]string{"cfg": "1"}), stamp.NamespaceKey(key, "ns"))
	if err != nil {
		t.Fatal(err)
	}
	st.Key = stamp.KeyFingerprint(key)
	return st
}
