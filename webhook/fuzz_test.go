package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// reviewCodecs decodes AdmissionReviews as controller-runtime's webhook does (a
// universal deserializer over admission/v1 and v1beta1, case-sensitive).
var reviewCodecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	_ = admissionv1.AddToScheme(s)
	_ = admissionv1beta1.AddToScheme(s)
	return serializer.NewCodecFactory(s)
}()

// FuzzHandler posts arbitrary bytes to the admission webhook as the API server would.
// Whatever they are, it answers over HTTP without panicking; a review of a supported kind
// whose objects decode is admitted (configstamp never blocks) under the request's UID,
// and its patch, if any, is a JSON Patch that applies to the object.
func FuzzHandler(f *testing.F) {
	for _, seed := range handlerSeeds(f) {
		f.Add(seed)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"}, Data: map[string][]byte{"password": []byte("x")}}
	st := stamper(f, cm("cfg", "1"), cm("other", "2"), secret)
	st.Sources = stamp.Options{Secrets: true}
	st.Key = func() []byte { return []byte("0123456789abcdef0123456789abcdef") }
	wh := &admission.Webhook{Handler: st} // no panic recovery: a panic fails the target
	f.Fuzz(func(t *testing.T, body []byte) {
		w := post(wh, body)
		if w.Code != http.StatusOK {
			t.Fatalf("HTTP status %d, want 200 (errors travel in the review)", w.Code)
		}
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || out.Response == nil {
			t.Fatalf("the answer is not an AdmissionReview with a response (%v): %q", err, w.Body.String())
		}

		req, body, ok := supported(t, body)
		if !ok {
			return
		}
		// As the API server would send it.
		w = post(wh, body)
		out = admissionv1.AdmissionReview{}
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || out.Response == nil || w.Code != http.StatusOK {
			t.Fatalf("HTTP %d, not an AdmissionReview with a response (%v): %q", w.Code, err, w.Body.String())
		}
		if out.APIVersion == "" || out.Kind != "AdmissionReview" {
			t.Fatalf("response review without its type: %q", w.Body.String())
		}
		if out.Response.UID != req.UID {
			t.Fatalf("response UID %q, want the request's %q", out.Response.UID, req.UID)
		}
		if !out.Response.Allowed {
			t.Fatalf("configstamp blocked a decodable %s %s: %+v", req.Kind.Kind, req.Operation, out.Response.Result)
		}
		if out.Response.PatchType == nil {
			if len(out.Response.Patch) != 0 {
				t.Fatalf("a patch without a patch type")
			}
			return
		}
		if *out.Response.PatchType != admissionv1.PatchTypeJSONPatch {
			t.Fatalf("patch type %q", *out.Response.PatchType)
		}
		patched, err := applyJSONPatch(req.Object.Raw, out.Response.Patch)
		if err != nil {
			t.Fatalf("patch %s does not apply to %s: %v", out.Response.Patch, req.Object.Raw, err)
		}
		kind := workload.Find(workload.Builtin(), req.Kind.Group, req.Kind.Kind)
		if _, err := decode(kind, patched); err != nil {
			t.Fatalf("patched object %s no longer decodes: %v", patched, err)
		}
	})
}

func post(wh http.Handler, body []byte) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	wh.ServeHTTP(w, r)
	return w
}

// supported decodes body as the webhook does and reports whether it is a review the
// handler must admit: an admission.k8s.io/v1 or v1beta1 AdmissionReview whose request has
// a UID, of a stamped kind, CREATE or UPDATE, whose object (and old object, for UPDATE)
// decode as that kind. (An undecodable object is the one thing the handler answers with
// an error: the API server never sends one.) It returns the review as the API server
// would send it: the objects in canonical JSON (its serializer's: case-sensitive field
// names, no empty maps), as the request of the returned body.
func supported(t *testing.T, body []byte) (*admissionv1.AdmissionRequest, []byte, bool) {
	req := &admissionv1.AdmissionRequest{}
	ar := admissionv1.AdmissionReview{Request: req}
	ar.SetGroupVersionKind(admissionv1.SchemeGroupVersion.WithKind("AdmissionReview"))
	_, gvk, err := reviewCodecs.UniversalDeserializer().Decode(body, nil, &reviewOf{ar})
	if err != nil || gvk == nil || gvk.Group != admissionv1.GroupName || gvk.Kind != "AdmissionReview" ||
		(gvk.Version != "v1" && gvk.Version != "v1beta1") {
		// Not an AdmissionReview of a version the API server sends (controller-runtime
		// answers one of {"ApiVersion":"0"} under apiVersion "0" and no kind).
		return nil, nil, false
	}
	kind := workload.Find(workload.Builtin(), req.Kind.Group, req.Kind.Kind)
	if req.UID == "" || kind == nil {
		return nil, nil, false
	}
	canonical := func(raw *runtime.RawExtension) bool {
		obj, err := decode(kind, raw.Raw)
		if err != nil {
			return false
		}
		if raw.Raw, err = json.Marshal(obj); err != nil {
			t.Fatal(err)
		}
		return true
	}
	switch req.Operation {
	case admissionv1.Create:
	case admissionv1.Update:
		if !canonical(&req.OldObject) {
			return nil, nil, false
		}
	default:
		return nil, nil, false
	}
	if !canonical(&req.Object) {
		return nil, nil, false
	}
	ar.SetGroupVersionKind(*gvk)
	out, err := json.Marshal(ar)
	if err != nil {
		t.Fatal(err)
	}
	return req, out, true
}

// reviewOf decodes both AdmissionReview versions (as controller-runtime does).
type reviewOf struct{ admissionv1.AdmissionReview }

func (r *reviewOf) DeepCopyObject() runtime.Object { panic("not used") }
func (r *reviewOf) GetObjectKind() schema.ObjectKind {
	return &r.TypeMeta
}

// applyJSONPatch applies an RFC 6902 patch of add, remove and replace operations
// (the ones configstamp writes) to doc, strictly: every path must resolve.
func applyJSONPatch(doc, patch []byte) ([]byte, error) {
	var root any
	if err := json.Unmarshal(doc, &root); err != nil {
		return nil, err
	}
	var ops []struct {
		Op    string           `json:"op"`
		Path  *string          `json:"path"`
		Value *json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(patch, &ops); err != nil {
		return nil, fmt.Errorf("not a JSON Patch: %w", err)
	}
	for _, op := range ops {
		if op.Path == nil || (*op.Path != "" && !strings.HasPrefix(*op.Path, "/")) {
			return nil, fmt.Errorf("%s: bad path", op.Op)
		}
		var value any
		if op.Op == "add" || op.Op == "replace" {
			if op.Value == nil {
				return nil, fmt.Errorf("%s %s without a value", op.Op, *op.Path)
			}
			if err := json.Unmarshal(*op.Value, &value); err != nil {
				return nil, err
			}
		}
		if *op.Path == "" {
			return nil, fmt.Errorf("%s of the whole document", op.Op)
		}
		tokens := strings.Split((*op.Path)[1:], "/")
		for i, tok := range tokens {
			tokens[i] = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		}
		parent := root
		for _, tok := range tokens[:len(tokens)-1] {
			switch p := parent.(type) {
			case map[string]any:
				var ok bool
				if parent, ok = p[tok]; !ok {
					return nil, fmt.Errorf("%s %s: %q does not exist", op.Op, *op.Path, tok)
				}
			case []any:
				n, err := strconv.Atoi(tok)
				if err != nil || n < 0 || n >= len(p) {
					return nil, fmt.Errorf("%s %s: bad index %q", op.Op, *op.Path, tok)
				}
				parent = p[n]
			default:
				return nil, fmt.Errorf("%s %s: %q is not a container", op.Op, *op.Path, tok)
			}
		}
		last := tokens[len(tokens)-1]
		m, ok := parent.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s %s: the parent is not an object", op.Op, *op.Path)
		}
		_, has := m[last]
		switch op.Op {
		case "add":
			m[last] = value
		case "replace":
			if !has {
				return nil, fmt.Errorf("replace %s: no such member", *op.Path)
			}
			m[last] = value
		case "remove":
			if !has {
				return nil, fmt.Errorf("remove %s: no such member", *op.Path)
			}
			delete(m, last)
		default:
			return nil, fmt.Errorf("unexpected operation %q", op.Op)
		}
	}
	return json.Marshal(root)
}

// handlerSeeds are reviews of every stamped kind and operation, with the annotations the
// handler reads, and a few malformed ones.
func handlerSeeds(t testing.TB) [][]byte {
	review := func(req admission.Request) []byte {
		b, err := json.Marshal(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request:  &req.AdmissionRequest,
		})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	raw := func(obj any) runtime.RawExtension {
		b, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	withSecret := dep(nil, "img", "cfg")
	withSecret.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "P", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password"}}}}
	nudged := dep(nil, "img", "cfg")
	nudged.Annotations = map[string]string{stamp.NudgeAnnotation: "1", stamp.ExtraSourcesAnnotation: "configmap/other, secret/db, bogus"}
	stale := dep(map[string]string{stamp.HashAnnotation: strings.Repeat("0", 64), stamp.SourcesAnnotation: "configmap/cfg=000000000000"}, "img", "cfg", "missing")

	seeds := [][]byte{
		review(request(t, admissionv1.Create, dep(nil, "img", "cfg"), nil)),
		review(request(t, admissionv1.Update, dep(nil, "img:2", "cfg"), dep(nil, "img", "cfg"))),
		review(request(t, admissionv1.Update, nudged, stale)),
		review(request(t, admissionv1.Update, stale, stale)),
		review(request(t, admissionv1.Create, withSecret, nil)),
		review(request(t, admissionv1.Delete, nil, dep(nil, "img", "cfg"))),
	}
	for _, k := range []struct {
		kind string
		obj  any
	}{
		{"StatefulSet", &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "s", Annotations: map[string]string{stamp.SkipAnnotation: "true"}},
			Spec: appsv1.StatefulSetSpec{Template: dep(nil, "img", "cfg").Spec.Template}}},
		{"DaemonSet", &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Spec: appsv1.DaemonSetSpec{Template: withSecret.Spec.Template}}},
	} {
		req := request(t, admissionv1.Create, nil, nil)
		req.Kind.Kind, req.Object = k.kind, raw(k.obj)
		seeds = append(seeds, review(req))
	}
	badTemplate := request(t, admissionv1.Create, nil, nil)
	badTemplate.Object.Raw = []byte(`{"metadata":{"name":"x"},"spec":{"template":{"metadata":{"annotations":{}},"spec":{"containers":[{"name":"c","env":[{"name":"E","valueFrom":{"configMapKeyRef":{"name":"cfg","key":"k~/"}}}]}]}}}}`)
	seeds = append(seeds, review(badTemplate))
	v1beta1 := bytes.Replace(seeds[0], []byte(`"admission.k8s.io/v1"`), []byte(`"admission.k8s.io/v1beta1"`), 1)
	return append(seeds, v1beta1,
		[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"apps","version":"v1","kind":"Deployment"},"operation":"CREATE","object":{}}}`),
		[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"apps","version":"v1","kind":"Deployment"},"operation":"CREATE","object":null}}`),
		[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"apps","version":"v1","kind":"Deployment"},"operation":"UPDATE","object":{"spec":{"template":null}},"oldObject":{"spec":{"template":{"metadata":{"annotations":{"configstamp.io/config-hash":"x"}}}}}}}`),
		[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`),
		[]byte(`{"kind":"AdmissionReview","request":{"uid":"u"`),
		[]byte(`not json`),
		[]byte(``),
	)
}
