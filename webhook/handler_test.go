package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/stamp"
)

func dep(annotations map[string]string, image string, cms ...string) *appsv1.Deployment {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app"}}
	d.Spec.Template.Labels = map[string]string{"app": "app"}
	d.Spec.Template.Annotations = annotations
	d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "c", Image: image}}
	for _, n := range cms {
		d.Spec.Template.Spec.Volumes = append(d.Spec.Template.Spec.Volumes, corev1.Volume{Name: n,
			VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: n}}}})
	}
	return d
}

func request(t testing.TB, op admissionv1.Operation, obj, old *appsv1.Deployment) admission.Request {
	t.Helper()
	raw := func(d *appsv1.Deployment) runtime.RawExtension {
		if d == nil {
			return runtime.RawExtension{}
		}
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "uid", Kind: metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
		Operation: op, Namespace: "ns", Name: "app", Object: raw(obj), OldObject: raw(old),
	}}
}

func stamper(t testing.TB, objs ...client.Object) *Stamper {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	return &Stamper{Reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build(), Key: testKey}
}

// testKey is the installation key of the tests; testNSKey that of namespace "ns".
func testKey() []byte { return []byte("0123456789abcdef0123456789abcdef") }

var testNSKey = stamp.NamespaceKey(testKey(), "ns")

// testNudge is the marker of a nudge by a watcher holding testKey.
var testNudge = stamp.NudgeFor(stamp.KeyFingerprint(testKey()))

func cm(name, v string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string]string{"k": v}}
}

// expected is the stamp for ConfigMap "cfg" holding k=v.
func expected(t *testing.T, v string) stamp.Stamp {
	st, err := stamp.Compute(context.Background(), []stamp.Source{{Kind: stamp.KindConfigMap, Name: "cfg", AllKeys: true}},
		func(context.Context, string, string) (*corev1.ConfigMap, error) { return cm("cfg", v), nil }, testNSKey)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func stamped(st stamp.Stamp) map[string]string {
	return map[string]string{stamp.HashAnnotation: st.Hash, stamp.SourcesAnnotation: st.SourcesAnnotation()}
}

func TestHandleCreateStamps(t *testing.T) {
	s := stamper(t, cm("cfg", "1"))
	resp := s.Handle(context.Background(), request(t, admissionv1.Create, dep(nil, "img", "cfg"), nil))
	if !resp.Allowed || len(resp.Patches) != 3 || resp.Patches[2].Path != "/metadata/annotations/configstamp.io~1keys" {
		t.Fatalf("want three patches (stamp, record, keys), got %+v", resp)
	}
	p := resp.Patches[0]
	want := expected(t, "1")
	rec := resp.Patches[1]
	if r, ok := stamp.ParseObserved(rec.Value.(map[string]string)[stamp.ObservedAnnotation]); rec.Path != "/metadata/annotations" || !ok || r.Hash != want.Hash {
		t.Fatalf("record patch %+v", rec)
	}
	if p.Operation != "add" || p.Path != "/spec/template/metadata/annotations" {
		t.Fatalf("patch %+v", p)
	}
	if m := p.Value.(map[string]string); m[stamp.HashAnnotation] != want.Hash || m[stamp.SourcesAnnotation] != want.SourcesAnnotation() {
		t.Fatalf("patch value %v, want %s", m, want.Hash)
	}
	if resp.AuditAnnotations[AuditHash] != want.Hash || resp.AuditAnnotations[AuditSources] != want.SourcesAnnotation() {
		t.Fatalf("audit annotations %v", resp.AuditAnnotations)
	}
}

func TestHandlePatches(t *testing.T) {
	cur := expected(t, "1")
	old := expected(t, "0")
	tests := []struct {
		name      string
		op        admissionv1.Operation
		obj, prev *appsv1.Deployment
		wantOps   []string // "op path"
	}{
		{"current stamp without a record: only the record", admissionv1.Update, dep(stamped(cur), "img", "cfg"), dep(stamped(cur), "img", "cfg"),
			[]string{"add /metadata/annotations", "add /metadata/annotations/configstamp.io~1keys"}},
		{"current stamp and record: no patch", admissionv1.Update, withRecord(dep(stamped(cur), "img", "cfg"), "img", cur.Hash), withRecord(dep(stamped(cur), "img", "cfg"), "img", cur.Hash), nil},
		{"stale stamp: replace both keys", admissionv1.Update, dep(stamped(old), "img", "cfg"), dep(stamped(old), "img", "cfg"),
			[]string{"add /spec/template/metadata/annotations/configstamp.io~1config-hash", "add /spec/template/metadata/annotations/configstamp.io~1sources", "add /metadata/annotations", "add /metadata/annotations/configstamp.io~1keys"}},
		{"other annotations kept", admissionv1.Create, dep(map[string]string{"x": "y"}, "img", "cfg"), nil,
			[]string{"add /spec/template/metadata/annotations/configstamp.io~1config-hash", "add /spec/template/metadata/annotations/configstamp.io~1sources", "add /metadata/annotations", "add /metadata/annotations/configstamp.io~1keys"}},
		{"lazy adoption: no-op update of an unstamped Deployment", admissionv1.Update, dep(nil, "img", "cfg"), dep(nil, "img", "cfg"), nil},
		{"template change adopts", admissionv1.Update, dep(nil, "img:2", "cfg"), dep(nil, "img", "cfg"),
			[]string{"add /spec/template/metadata/annotations", "add /metadata/annotations", "add /metadata/annotations/configstamp.io~1keys"}},
		{"no config any more: stamp removed", admissionv1.Update, dep(stamped(cur), "img"), dep(stamped(cur), "img", "cfg"),
			[]string{"remove /spec/template/metadata/annotations/configstamp.io~1config-hash", "remove /spec/template/metadata/annotations/configstamp.io~1sources"}},
		{"no config at all: nothing", admissionv1.Create, dep(nil, "img"), nil, nil},
		{"replace dropped the stamp: recomputed", admissionv1.Update, dep(nil, "img", "cfg"), dep(stamped(cur), "img", "cfg"),
			[]string{"add /spec/template/metadata/annotations", "add /metadata/annotations", "add /metadata/annotations/configstamp.io~1keys"}},
		{"valid record: someone's update passes through", admissionv1.Update, withRecord(dep(stamped(old), "img", "cfg"), "img", ""), withRecord(dep(stamped(old), "img", "cfg"), "img", ""), nil},
		{"valid record: a replace that dropped the stamp gets it back", admissionv1.Update, withRecord(dep(nil, "img", "cfg"), "img", ""), withRecord(dep(stamped(old), "img", "cfg"), "img", ""),
			[]string{"add /spec/template/metadata/annotations"}},
		{"record dropped by an update: carried forward", admissionv1.Update, dep(nil, "img", "cfg"), withRecord(dep(nil, "img", "cfg"), "img", ""),
			[]string{"add /metadata/annotations"}},
		{"someone else's record (rollout undo copies one): the stored one stays", admissionv1.Update,
			withRecord(dep(nil, "img", "cfg"), "img", strings.Repeat("1", 64)), withRecord(dep(nil, "img", "cfg"), "img", ""),
			[]string{"add /metadata/annotations/configstamp.io~1observed"}},
		{"stamping rewrites the record", admissionv1.Update, withRecord(dep(nil, "img:2", "cfg"), "img", ""), withRecord(dep(nil, "img", "cfg"), "img", ""),
			[]string{"add /spec/template/metadata/annotations", "add /metadata/annotations/configstamp.io~1observed", "add /metadata/annotations/configstamp.io~1keys"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := stamper(t, cm("cfg", "1")).Handle(context.Background(), request(t, tt.op, tt.obj, tt.prev))
			if !resp.Allowed {
				t.Fatalf("denied: %+v", resp.Result)
			}
			var got []string
			for _, p := range resp.Patches {
				got = append(got, p.Operation+" "+p.Path)
			}
			if len(got) != len(tt.wantOps) {
				t.Fatalf("patches %v, want %v", got, tt.wantOps)
			}
			for i := range got {
				if got[i] != tt.wantOps[i] {
					t.Fatalf("patches %v, want %v", got, tt.wantOps)
				}
			}
		})
	}
}

// withRecord gives d a record of hash (empty: an arbitrary one) made for d's template
// with image.
func withRecord(d *appsv1.Deployment, image, hash string) *appsv1.Deployment {
	t := d.Spec.Template.DeepCopy()
	t.Spec.Containers[0].Image = image
	if hash == "" {
		hash = strings.Repeat("0", 64)
	}
	rec := stamp.Observed{Hash: hash, Template: stamp.TemplateFingerprint(t)}
	d.Annotations = map[string]string{stamp.ObservedAnnotation: rec.String()}
	return d
}

// failingReader is a reader whose every read times out, as an overloaded etcd does.
func failingReader() client.Reader {
	return readerFailingWith(func() error { return errors.New("etcdserver: request timed out") })
}

// readerFailingWith is a reader whose every read returns fail().
func readerFailingWith(fail func() error) client.Reader {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	return fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return fail()
		},
	}).Build()
}

func TestHandleReadErrorKeepsTheStoredStamp(t *testing.T) {
	reader := failingReader()
	cur := expected(t, "1")
	// kubectl replace with a manifest that has no stamp, while reads fail.
	resp := (&Stamper{Reader: reader, Key: testKey}).Handle(context.Background(), request(t, admissionv1.Update, dep(nil, "img:2", "cfg"), dep(stamped(cur), "img", "cfg")))
	if !resp.Allowed || len(resp.Patches) != 1 || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "keeps its stored config hash") {
		t.Fatalf("want allowed with the stored stamp and a warning; got %+v", resp)
	}
	if m := resp.Patches[0].Value.(map[string]string); m[stamp.HashAnnotation] != cur.Hash || m[stamp.SourcesAnnotation] != cur.SourcesAnnotation() {
		t.Fatalf("restored %v, want %s", m, cur.Hash)
	}
}

func TestHandleHoldsWhenRequiredConfigGoesMissing(t *testing.T) {
	cur := expected(t, "1")
	nudge := dep(stamped(cur), "img", "cfg")
	nudge.Annotations = map[string]string{stamp.NudgeAnnotation: testNudge}
	resp := stamper(t).Handle(context.Background(), request(t, admissionv1.Update, nudge, dep(stamped(cur), "img", "cfg")))
	if !resp.Allowed || len(resp.Patches) != 1 || resp.Patches[0].Path != "/metadata/annotations/configstamp.io~1nudge" {
		t.Fatalf("a nudge into missing config changed more than the marker: %+v", resp.Patches)
	}
	if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "configmap/cfg is missing") {
		t.Fatalf("warnings %q", resp.Warnings)
	}
	// The user's own template change is stamped anyway, with a warning.
	resp = stamper(t).Handle(context.Background(), request(t, admissionv1.Update, dep(stamped(cur), "img:2", "cfg"), dep(stamped(cur), "img", "cfg")))
	if len(resp.Patches) != 4 || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "cannot start") {
		t.Fatalf("template change with missing config: %+v", resp)
	}
}

func TestHandleNudgeIsStrippedAndAdopts(t *testing.T) {
	d := dep(nil, "img", "cfg")
	d.Annotations = map[string]string{stamp.NudgeAnnotation: testNudge}
	resp := stamper(t, cm("cfg", "1")).Handle(context.Background(), request(t, admissionv1.Update, d, dep(nil, "img", "cfg")))
	if len(resp.Patches) != 5 || resp.Patches[0].Operation != "remove" || resp.Patches[0].Path != "/metadata/annotations/configstamp.io~1nudge" ||
		resp.Patches[1].Path != "/spec/template/metadata/annotations" || resp.Patches[2].Path != "/metadata/annotations/configstamp.io~1observed" ||
		resp.Patches[3].Path != "/metadata/annotations/configstamp.io~1keys" || resp.Patches[4].Path != "/metadata/annotations/kubernetes.io~1change-cause" {
		t.Fatalf("patches %+v", resp.Patches)
	}
	// The rollout is configstamp's: its cause names the first stamp, its source and digest.
	want := "configstamp: first stamp (configmap/cfg " + stamp.ParseSources(expected(t, "1").SourcesAnnotation())["configmap/cfg"] + ")"
	if got := resp.Patches[4].Value; got != want {
		t.Fatalf("change cause %q, want %q", got, want)
	}
}

func TestHandleSkip(t *testing.T) {
	d := dep(nil, "img", "cfg")
	d.Annotations = map[string]string{stamp.SkipAnnotation: "true"}
	resp := stamper(t, cm("cfg", "1")).Handle(context.Background(), request(t, admissionv1.Create, d, nil))
	if !resp.Allowed || len(resp.Patches) != 0 {
		t.Fatalf("skipped Deployment patched: %+v", resp.Patches)
	}
}

func TestHandleFailsOpenOnReadErrors(t *testing.T) {
	reader := failingReader()
	resp := (&Stamper{Reader: reader, Key: testKey}).Handle(context.Background(), request(t, admissionv1.Create, dep(nil, "img", "cfg"), nil))
	if !resp.Allowed || len(resp.Patches) != 0 || len(resp.Warnings) != 1 {
		t.Fatalf("want allowed, unpatched, with a warning; got %+v", resp)
	}
}

func TestHandleMissingConfigMapIsStamped(t *testing.T) {
	resp := stamper(t).Handle(context.Background(), request(t, admissionv1.Create, dep(nil, "img", "cfg"), nil))
	if !resp.Allowed || len(resp.Patches) != 3 {
		t.Fatalf("got %+v", resp)
	}
	if got := resp.Patches[0].Value.(map[string]string)[stamp.SourcesAnnotation]; got != "configmap/cfg=missing" {
		t.Fatalf("sources %q", got)
	}
}

func TestHandleMalformed(t *testing.T) {
	s := stamper(t)
	bad := request(t, admissionv1.Create, nil, nil)
	bad.Object.Raw = []byte(`{"spec":{"replicas":"many"}}`)
	for name, req := range map[string]admission.Request{
		"undecodable object": bad,
		"no uid":             {},
		"empty object":       request(t, admissionv1.Create, nil, nil),
	} {
		resp := s.Handle(context.Background(), req)
		if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusBadRequest || resp.Result.Message == "" {
			t.Errorf("%s: want a 400 error response, got %+v", name, resp)
		}
	}
	other := request(t, admissionv1.Create, dep(nil, "img", "cfg"), nil)
	other.Kind.Kind = "ReplicaSet"
	if resp := s.Handle(context.Background(), other); !resp.Allowed || len(resp.Patches) != 0 {
		t.Errorf("other kinds must pass untouched: %+v", resp)
	}
}

// A workload whose template carries the wanted stamp but whose pods, per its record, run
// other config (the ConfigMap went back to what the stale stamp says): a nudge must still
// roll it, so the template gets a restart annotation.
func TestHandleNudgeRollsWhenOnlyTheRecordDiffers(t *testing.T) {
	cur := expected(t, "1")
	pods := expected(t, "2")
	stored := withRecord(dep(stamped(cur), "img", "cfg"), "img", pods.Hash)
	nudge := stored.DeepCopy()
	nudge.Annotations[stamp.NudgeAnnotation] = testNudge
	resp := stamper(t, cm("cfg", "1")).Handle(context.Background(), request(t, admissionv1.Update, nudge, stored))
	var got []string
	for _, p := range resp.Patches {
		got = append(got, p.Operation+" "+p.Path)
	}
	want := []string{"remove /metadata/annotations/configstamp.io~1nudge", "add /spec/template/metadata/annotations/configstamp.io~1restarted-at",
		"add /metadata/annotations/configstamp.io~1observed", "add /metadata/annotations/configstamp.io~1keys", "add /metadata/annotations/kubernetes.io~1change-cause"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("patches %v, want %v", got, want)
	}
	r, ok := stamp.ParseObserved(resp.Patches[2].Value.(string))
	if !ok || r.Hash != cur.Hash || r.Template != stamp.TemplateFingerprint(&stored.Spec.Template) {
		t.Fatalf("record %+v: want the current hash (the restart annotation is configstamp's: same template)", r)
	}
}

// The watcher's own record update (marker "record") may change the record.
func TestHandleWatcherRecordIsKept(t *testing.T) {
	stored := dep(nil, "img", "cfg")
	update := withRecord(dep(nil, "img", "cfg"), "img", "")
	update.Annotations[stamp.NudgeAnnotation] = stamp.NudgeRecord
	resp := stamper(t, cm("cfg", "1")).Handle(context.Background(), request(t, admissionv1.Update, update, stored))
	if len(resp.Patches) != 1 || resp.Patches[0].Path != "/metadata/annotations/configstamp.io~1nudge" {
		t.Fatalf("patches %+v: want only the marker removed", resp.Patches)
	}
}

// A reinvocation (another webhook changed the object after configstamp stamped it) sees
// the stored object as old and configstamp's own fresh stamp and record as incoming:
// they stay.
func TestHandleReinvocationKeepsItsOwnStamp(t *testing.T) {
	old := expected(t, "0")
	cur := expected(t, "1")
	stored := withRecord(dep(stamped(old), "img", "cfg"), "img", old.Hash)
	reinvoked := withRecord(dep(stamped(cur), "img", "cfg"), "img", cur.Hash)
	reinvoked.Labels = map[string]string{"policy": "applied"} // what the other webhook did
	resp := stamper(t, cm("cfg", "1")).Handle(context.Background(), request(t, admissionv1.Update, reinvoked, stored))
	if len(resp.Patches) != 0 {
		t.Fatalf("a reinvocation undid configstamp's own patch: %+v", resp.Patches)
	}
	// The same stamp and record set by someone else, while the config says otherwise,
	// are put back to the stored ones.
	resp = stamper(t, cm("cfg", "2")).Handle(context.Background(), request(t, admissionv1.Update, reinvoked, stored))
	if len(resp.Patches) != 3 {
		t.Fatalf("foreign stamp and record not restored: %+v", resp.Patches)
	}
}

// Only configstamp's own user may nudge or write a record: anyone else's marker (left
// over from an outage, or copied back by rollout undo) is stripped and ignored.
func TestHandleMarkerFromAnotherUser(t *testing.T) {
	cur := expected(t, "1")
	stored := withRecord(dep(stamped(cur), "img", "cfg"), "img", cur.Hash)
	update := stored.DeepCopy()
	update.Annotations[stamp.NudgeAnnotation] = stamp.NudgeRecord
	update.Annotations[stamp.ObservedAnnotation] = stamp.Observed{Hash: strings.Repeat("1", 64), Template: stamp.TemplateFingerprint(&stored.Spec.Template)}.String()
	s := stamper(t, cm("cfg", "1"))
	s.Self = "system:serviceaccount:configstamp-system:configstamp"
	req := request(t, admissionv1.Update, update, stored)
	req.UserInfo.Username = "alice"
	resp := s.Handle(context.Background(), req)
	var got []string
	for _, p := range resp.Patches {
		got = append(got, p.Operation+" "+p.Path)
	}
	if want := "remove /metadata/annotations/configstamp.io~1nudge,add /metadata/annotations/configstamp.io~1observed"; strings.Join(got, ",") != want {
		t.Fatalf("patches %v, want %s", got, want)
	}
	req.UserInfo.Username = s.Self
	if resp := s.Handle(context.Background(), req); len(resp.Patches) != 1 {
		t.Fatalf("configstamp's own record update: %+v", resp.Patches)
	}
	// Split roles: the watcher's user (Watchers) counts too; anyone else still does not.
	s.Watchers = []string{"system:serviceaccount:configstamp-system:configstamp-watcher"}
	req.UserInfo.Username = s.Watchers[0]
	if resp := s.Handle(context.Background(), req); len(resp.Patches) != 1 {
		t.Fatalf("the watcher's record update: %+v", resp.Patches)
	}
	req.UserInfo.Username = "alice"
	if resp := s.Handle(context.Background(), req); len(resp.Patches) != 2 {
		t.Fatalf("alice's marker honoured with Watchers set: %+v", resp.Patches)
	}
	// Self unknown (no SelfSubjectReview): the named watcher's markers count, a tenant's
	// (a look-alike name in another namespace included) still do not.
	s.Self = ""
	for _, user := range []string{"alice", "system:serviceaccount:tenant:configstamp-watcher"} {
		req.UserInfo.Username = user
		if resp := s.Handle(context.Background(), req); len(resp.Patches) != 2 {
			t.Fatalf("%s's marker honoured with Self unknown and Watchers set: %+v", user, resp.Patches)
		}
	}
	req.UserInfo.Username = s.Watchers[0]
	if resp := s.Handle(context.Background(), req); len(resp.Patches) != 1 {
		t.Fatalf("the watcher's record update with Self unknown: %+v", resp.Patches)
	}
}

func TestHandleReplaceKeepsTheRestartAnnotation(t *testing.T) {
	cur := expected(t, "1")
	ann := stamped(cur)
	ann[stamp.RestartedAnnotation] = "2026-11-30T12:00:00Z"
	stored := withRecord(dep(ann, "img", "cfg"), "img", cur.Hash)
	replaced := dep(nil, "img", "cfg") // a manifest without any of configstamp's keys
	resp := stamper(t, cm("cfg", "1")).Handle(context.Background(), request(t, admissionv1.Update, replaced, stored))
	if len(resp.Patches) != 2 || resp.Patches[0].Path != "/spec/template/metadata/annotations" {
		t.Fatalf("patches %+v", resp.Patches)
	}
	if m := resp.Patches[0].Value.(map[string]string); m[stamp.RestartedAnnotation] != ann[stamp.RestartedAnnotation] || m[stamp.HashAnnotation] != cur.Hash {
		t.Fatalf("restored %v", m)
	}
}

// A nudge that finds the config as the pods' record says they run it, while the stamp
// names other config (the config changed back between the watcher's check and the
// nudge): nothing rolls. Only the marker goes; the stamp, record and cause stay.
func TestHandleNudgeKeepsWhenThePodsRunTheConfig(t *testing.T) {
	stale := expected(t, "1")
	pods := expected(t, "2")
	stored := withRecord(dep(stamped(stale), "img", "cfg"), "img", pods.Hash)
	stored.Annotations[stamp.ChangeCauseAnnotation] = "image 2"
	nudge := stored.DeepCopy()
	nudge.Annotations[stamp.NudgeAnnotation] = testNudge
	o := admit(t, stamper(t, cm("cfg", "2")), request(t, admissionv1.Update, nudge, stored), nudge)
	var got []string
	for _, p := range o.resp.Patches {
		got = append(got, p.Operation+" "+p.Path)
	}
	if want := "remove /metadata/annotations/configstamp.io~1nudge"; strings.Join(got, ",") != want || o.result != resultUnchanged {
		t.Fatalf("patches %v (result %s), want only %s (unchanged)", got, o.result, want)
	}
	if !strings.Contains(strings.Join(o.logs, "\n"), "Kept the stored config hash: the pods run the config as it is now") {
		t.Errorf("not logged: %q", o.logs)
	}
	// The same without a stamp (adopted: the watcher recorded what its pods run).
	adopted := withRecord(dep(nil, "img", "cfg"), "img", pods.Hash)
	nudge = adopted.DeepCopy()
	nudge.Annotations[stamp.NudgeAnnotation] = testNudge
	if o := admit(t, stamper(t, cm("cfg", "2")), request(t, admissionv1.Update, nudge, adopted), nudge); len(o.resp.Patches) != 1 || o.result != resultUnchanged {
		t.Fatalf("adopted: patches %+v (result %s), want only the marker removed", o.resp.Patches, o.result)
	}
	nudge = stored.DeepCopy()
	nudge.Annotations[stamp.NudgeAnnotation] = testNudge
	// The config then changes to what the stamp names: the record still rules, the
	// pods are restarted onto it.
	o = admit(t, stamper(t, cm("cfg", "1")), request(t, admissionv1.Update, nudge, stored), nudge)
	if o.result != resultStamped || o.stored.Spec.Template.Annotations[stamp.RestartedAnnotation] == "" {
		t.Fatalf("result %s, template %v: want a restart", o.result, o.stored.Spec.Template.Annotations)
	}
}

// A reinvocation after configstamp's own patch (another webhook changed the object
// since) that cannot read config puts the stored stamp back and says so, as a first
// call does: the watcher tells an unread nudge by that warning.
func TestHandleReinvocationReadErrorWarns(t *testing.T) {
	withRec := func(d *appsv1.Deployment, st stamp.Stamp) *appsv1.Deployment {
		d.Annotations = map[string]string{stamp.ObservedAnnotation: stamp.Observed{Hash: st.Hash, Template: stamp.TemplateFingerprint(&d.Spec.Template)}.String()}
		return d
	}
	old, now := expected(t, "1"), expected(t, "2")
	stored := withRec(dep(stamped(old), "img", "cfg"), old)
	incoming := withRec(dep(stamped(now), "img", "cfg"), now) // as configstamp's patch left it
	resp := (&Stamper{Reader: failingReader(), Key: testKey}).Handle(context.Background(), request(t, admissionv1.Update, incoming, stored))
	if !resp.Allowed || len(resp.Warnings) != 1 || !strings.HasPrefix(resp.Warnings[0], stamp.WarningUnreadConfig) {
		t.Fatalf("want allowed with the stored stamp and the unread warning; got %+v", resp)
	}
}

// The API server drops a warning holding control characters or invalid UTF-8: the
// webhook's warnings have none.
func TestWarningsArePassable(t *testing.T) {
	resp := respond(nil, "configstamp: could not read config: line one\nline two\x00\xff")
	if w := resp.Warnings[0]; strings.ContainsFunc(w, unicode.IsControl) || !utf8.ValidString(w) || !strings.HasPrefix(w, stamp.WarningUnreadConfig) {
		t.Errorf("warning %q", w)
	}
}
