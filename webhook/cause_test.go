package webhook

import (
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/configstamp/configstamp/internal/waves"
	"github.com/configstamp/configstamp/stamp"
)

// causeAfter admits req and returns the change cause the stored object would carry.
func causeAfter(t *testing.T, req *appsv1.Deployment, old *appsv1.Deployment, op admissionv1.Operation) string {
	t.Helper()
	o := admit(t, stamper(t, cm("cfg", "2")), request(t, op, req, old), req)
	return o.stored.Annotations[stamp.ChangeCauseAnnotation]
}

// The change cause `kubectl rollout history` shows: configstamp's on the rollouts it
// causes, and never left on someone else's.
func TestChangeCause(t *testing.T) {
	ours := stamp.ChangeCause(stamp.Rollout{StoredHash: strings.Repeat("1", 64), StoredSources: "configmap/cfg=111111111111",
		Hash: strings.Repeat("2", 64), Sources: "configmap/cfg=222222222222"})
	stored := dep(stamped(expected(t, "1")), "img:1", "cfg")
	stored.Annotations = map[string]string{stamp.ChangeCauseAnnotation: ours}

	// Someone else's rollout (a new image), the cause of configstamp's last one kept by
	// their client: removed.
	update := stored.DeepCopy()
	update.Spec.Template.Spec.Containers[0].Image = "img:2"
	if got := causeAfter(t, update, stored, admissionv1.Update); got != "" {
		t.Errorf("someone else's rollout keeps configstamp's earlier cause %q", got)
	}
	// ... with a cause of their own: kept.
	update.Annotations[stamp.ChangeCauseAnnotation] = "image 2"
	if got := causeAfter(t, update, stored, admissionv1.Update); got != "image 2" {
		t.Errorf("someone else's own cause became %q", got)
	}
	// An update that keeps the template (no rollout): left alone.
	labelled := stored.DeepCopy()
	labelled.Labels = map[string]string{"team": "x"}
	if got := causeAfter(t, labelled, stored, admissionv1.Update); got != ours {
		t.Errorf("an update without a rollout changed the cause to %q", got)
	}
	// A CREATE from a manifest that copied configstamp's cause: removed.
	created := stored.DeepCopy()
	if got := causeAfter(t, created, nil, admissionv1.Create); got != "" {
		t.Errorf("a new workload keeps a copied configstamp cause %q", got)
	}

	// configstamp's own rollout (a nudge after cfg changed) replaces whatever cause the
	// workload carried, naming the source and its old and new digests.
	stored.Annotations[stamp.ChangeCauseAnnotation] = "image 2"
	nudge := stored.DeepCopy()
	nudge.Annotations[stamp.NudgeAnnotation] = testNudge
	digest := func(v string) string { return stamp.ParseSources(expected(t, v).SourcesAnnotation())["configmap/cfg"] }
	want := "configstamp: configmap/cfg changed (digest " + digest("1") + " -> " + digest("2") + "; keys: unknown)"
	if got := causeAfter(t, nudge, stored, admissionv1.Update); got != want {
		t.Errorf("configstamp's rollout has cause %q, want %q", got, want)
	}
	// ... naming the keys that changed where the keys annotation of the stored stamp
	// was written (stamp.KeysAnnotation).
	keyed := stored.DeepCopy()
	keyed.Annotations[stamp.KeysAnnotation] = "configmap/cfg=" + digest("1") + ":k=00000000"
	nudge = keyed.DeepCopy()
	nudge.Annotations[stamp.NudgeAnnotation] = testNudge
	if got, want := causeAfter(t, nudge, keyed, admissionv1.Update), "configstamp: configmap/cfg changed (digest "+digest("1")+" -> "+digest("2")+"; keys: k)"; got != want {
		t.Errorf("configstamp's rollout with keys has cause %q, want %q", got, want)
	}
	// ... the same with a record that agrees with the stamp.
	recorded := withRecord(stored.DeepCopy(), "img:1", expected(t, "1").Hash)
	nudge = recorded.DeepCopy()
	nudge.Annotations[stamp.NudgeAnnotation] = testNudge
	if got := causeAfter(t, nudge, recorded, admissionv1.Update); got != want {
		t.Errorf("configstamp's rollout (recorded) has cause %q, want %q", got, want)
	}
	// A record that says the pods run other config than the stamp names (the stamp
	// was made for another template): the stamp's digests are not what they ran; the
	// cause gives the record's config hash.
	ran := expected(t, "0").Hash
	stale := withRecord(stored.DeepCopy(), "img:1", ran)
	nudge = stale.DeepCopy()
	nudge.Annotations[stamp.NudgeAnnotation] = testNudge
	want = "configstamp: config changed (config hash " + ran[:12] + " -> " + expected(t, "2").Hash[:12] + ")"
	if got := causeAfter(t, nudge, stale, admissionv1.Update); got != want {
		t.Errorf("configstamp's rollout from a record has cause %q, want %q", got, want)
	}
	// An adopted workload (a record, no stamp) rolled: its first stamp.
	adopted := withRecord(dep(nil, "img:1", "cfg"), "img:1", ran)
	nudge = adopted.DeepCopy()
	nudge.Annotations[stamp.NudgeAnnotation] = testNudge
	want += "; first stamp (configmap/cfg " + digest("2") + ")"
	if got := causeAfter(t, nudge, adopted, admissionv1.Update); got != want {
		t.Errorf("an adopted workload's first rollout has cause %q, want %q", got, want)
	}
	// A nudge in waves names its wave: the entry of waves.RolledAnnotation it writes
	// (an entry stored before, of an earlier nudge, does not count).
	inWaves := stored.DeepCopy()
	earlier := waves.RolledEntry{Change: "configmap/cfg=000000000000", Wave: 1, Waves: 3, At: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	inWaves.Annotations[waves.RolledAnnotation] = earlier.String()
	nudge = inWaves.DeepCopy()
	nudge.Annotations[stamp.NudgeAnnotation] = testNudge
	entry := waves.RolledEntry{Change: "configmap/cfg=" + digest("2"), Wave: 2, Waves: 4, At: time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)}
	nudge.Annotations[waves.RolledAnnotation] = earlier.String() + "; " + entry.String()
	want = "configstamp: configmap/cfg changed (digest " + digest("1") + " -> " + digest("2") + "; keys: unknown) (wave 2 of 4 for configmap/cfg)"
	if got := causeAfter(t, nudge, inWaves, admissionv1.Update); got != want {
		t.Errorf("configstamp's rollout in waves has cause %q, want %q", got, want)
	}
	nudge.Annotations[waves.RolledAnnotation] = earlier.String()
	if got := causeAfter(t, nudge, inWaves, admissionv1.Update); strings.Contains(got, "wave") {
		t.Errorf("a nudge that writes no wave has cause %q", got)
	}
	// A nudge that finds the stamp current rolls nothing: the cause stays.
	current := dep(stamped(expected(t, "2")), "img:1", "cfg")
	current.Annotations = map[string]string{stamp.ChangeCauseAnnotation: "image 2"}
	nudge = current.DeepCopy()
	nudge.Annotations[stamp.NudgeAnnotation] = testNudge
	if got := causeAfter(t, nudge, current, admissionv1.Update); got != "image 2" {
		t.Errorf("a nudge that rolled nothing changed the cause to %q", got)
	}
}

// A cause leaves the controllers room (stamp.CauseHeadroom) for their own annotations on
// the rollout's ReplicaSet: a Deployment near the limit rolls without one, still stamped
// and recorded.
func TestChangeCauseLeavesHeadroom(t *testing.T) {
	for _, tc := range []struct {
		name      string
		room      int
		wantCause bool
	}{
		{"just under the limit", 3000, false},
		{"within the headroom", stamp.CauseHeadroom, false},
		{"room past the headroom", stamp.CauseHeadroom + 1000, true},
	} {
		stored := dep(stamped(expected(t, "1")), "img:1", "cfg")
		stored.Annotations = full(nil, tc.room)
		nudge := stored.DeepCopy()
		nudge.Annotations[stamp.NudgeAnnotation] = testNudge
		o := admit(t, stamper(t, cm("cfg", "2")), request(t, admissionv1.Update, nudge, stored), nudge)
		if o.result != resultStamped || hashOfStored(o) != expected(t, "2").Hash {
			t.Errorf("%s: result %q, stamp %q: want the new stamp", tc.name, o.result, hashOfStored(o))
		}
		if o.stored.Annotations[stamp.ObservedAnnotation] == "" {
			t.Errorf("%s: no record", tc.name)
		}
		if size := annotationSize(o.stored.Annotations); size > stamp.AnnotationSizeLimit {
			t.Errorf("%s: %d bytes of annotations, past the limit", tc.name, size)
		}
		cause, ok := o.stored.Annotations[stamp.ChangeCauseAnnotation]
		if ok != tc.wantCause {
			t.Errorf("%s: cause %q (set: %v), want set: %v", tc.name, cause, ok, tc.wantCause)
		}
		if ok && stamp.AnnotationSizeLimit-annotationSize(o.stored.Annotations) < stamp.CauseHeadroom {
			t.Errorf("%s: a cause that leaves %d bytes", tc.name, stamp.AnnotationSizeLimit-annotationSize(o.stored.Annotations))
		}
	}
}
