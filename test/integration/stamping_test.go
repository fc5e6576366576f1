package integration

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/webhook"
)

// everyForm is a pod spec that consumes ConfigMaps in every way a pod can.
func everyForm() corev1.PodSpec {
	ref := func(n string) corev1.LocalObjectReference { return corev1.LocalObjectReference{Name: n} }
	return corev1.PodSpec{
		Volumes: []corev1.Volume{
			{Name: "all", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref("vol-all")}}},
			{Name: "items", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref("vol-items"),
				Items: []corev1.KeyToPath{{Key: "seen", Path: "seen"}}}}},
			{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: ref("projected")}},
			}}}},
			{Name: "absent", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref("absent"), Optional: ptr.To(true)}}},
		},
		InitContainers: []corev1.Container{{Name: "init", Image: "registry.example/init:1",
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref("init-env")}}}}},
		Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1",
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref("env-from")}}},
			Env: []corev1.EnvVar{{Name: "ONE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: ref("key-ref"), Key: "one"}}}},
			VolumeMounts: []corev1.VolumeMount{{Name: "all", MountPath: "/a"}, {Name: "items", MountPath: "/i"}, {Name: "proj", MountPath: "/p"}, {Name: "absent", MountPath: "/x"}},
		}},
	}
}

var everyFormSources = []docSource{
	{name: "vol-all"}, {name: "vol-items", keys: []string{"seen"}}, {name: "projected"}, {name: "absent"},
	{name: "init-env"}, {name: "env-from"}, {name: "key-ref", keys: []string{"one"}},
}

func createEveryFormConfig(t *testing.T, ns string) {
	create(t, configMap(ns, "vol-all", map[string]string{"a.yaml": "a: 1", "b.yaml": "b: 2"}))
	create(t, configMap(ns, "vol-items", map[string]string{"seen": "yes", "unseen": "no"}))
	projected := configMap(ns, "projected", map[string]string{"p": "1"})
	projected.BinaryData = map[string][]byte{"blob": {0, 1, 2, 255}}
	create(t, projected)
	create(t, configMap(ns, "init-env", map[string]string{"INIT": "1"}))
	create(t, configMap(ns, "env-from", map[string]string{"LEVEL": "debug"}))
	create(t, configMap(ns, "key-ref", map[string]string{"one": "1", "two": "2"}))
}

func testCreateStampsEveryForm(t *testing.T, cs *framework.Configstamp) {
	ns := env.NewNamespace(t, true)
	createEveryFormConfig(t, ns)
	d := createDeployment(t, ns, "app", everyForm())
	want := docHash(t, ns, everyFormSources...)
	if got := hashOf(d); got != want {
		t.Fatalf("stamp on create = %q, want %q (computed from the documented encoding)", got, want)
	}
	srcs := digests(d.Spec.Template.Annotations[stamp.SourcesAnnotation])
	for _, s := range everyFormSources {
		if srcs["configmap/"+s.name] == "" {
			t.Errorf("sources annotation %q lacks %s", d.Spec.Template.Annotations[stamp.SourcesAnnotation], s.name)
		}
	}
	if srcs["configmap/absent"] != "missing" {
		t.Errorf("absent ConfigMap shows as %q, want missing", srcs["configmap/absent"])
	}
	if len(srcs) != len(everyFormSources) {
		t.Errorf("sources annotation has %d entries, want %d", len(srcs), len(everyFormSources))
	}
}

func testOptOut(t *testing.T, cs *framework.Configstamp) {
	t.Run("unlabelled namespace", func(t *testing.T) {
		t.Parallel()
		ns := env.NewNamespace(t, false)
		createEveryFormConfig(t, ns)
		d := createDeployment(t, ns, "app", everyForm())
		if len(d.Spec.Template.Annotations) != 0 {
			t.Fatalf("Deployment in an unlabelled namespace was stamped: %v", d.Spec.Template.Annotations)
		}
		setData(t, ns, "vol-all", "a.yaml", "changed")
		unchanged(t, 5*time.Second, d)
	})
	t.Run("skip annotation", func(t *testing.T) {
		t.Parallel()
		ns := env.NewNamespace(t, true)
		createEveryFormConfig(t, ns)
		d := deployment("app", everyForm())
		d.Namespace = ns
		d.Annotations = map[string]string{stamp.SkipAnnotation: "true"}
		create(t, d)
		if len(d.Spec.Template.Annotations) != 0 {
			t.Fatalf("skipped Deployment was stamped: %v", d.Spec.Template.Annotations)
		}
		setData(t, ns, "vol-all", "a.yaml", "changed")
		unchanged(t, 5*time.Second, d)
	})
	t.Run("ignored ConfigMap", func(t *testing.T) {
		t.Parallel()
		ns := env.NewNamespace(t, true)
		ign := configMap(ns, "ignored", map[string]string{"k": "v"})
		ign.Annotations = map[string]string{stamp.IgnoreAnnotation: "true"}
		create(t, ign)
		create(t, configMap(ns, "kept", map[string]string{"k": "v"}))
		d := createDeployment(t, ns, "app", podWithVolumes("ignored", "kept"))
		if got, want := hashOf(d), docHash(t, ns, docSource{name: "kept"}); got != want {
			t.Fatalf("stamp %q, want %q (the ignored ConfigMap left out)", got, want)
		}
		setData(t, ns, "ignored", "k", "changed")
		unchanged(t, 5*time.Second, d)
	})
}

func testDryRun(t *testing.T, cs *framework.Configstamp) {
	ns := env.NewNamespace(t, true)
	createEveryFormConfig(t, ns)
	d := deployment("dry", everyForm())
	d.Namespace = ns
	if err := k8s.Create(bg, d, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	if got, want := hashOf(d), docHash(t, ns, everyFormSources...); got != want {
		t.Fatalf("dry-run stamp %q, want %q", got, want)
	}
	err := k8s.Get(bg, client.ObjectKeyFromObject(d), &appsv1.Deployment{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("dry-run create stored something: get returned %v", err)
	}
	// The real create gets the same answer.
	real := deployment("dry", everyForm())
	real.Namespace = ns
	create(t, real)
	if hashOf(real) != hashOf(d) {
		t.Fatalf("real create stamp %q differs from dry-run %q", hashOf(real), hashOf(d))
	}
}

func testAudit(t *testing.T, cs *framework.Configstamp) {
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "audited", map[string]string{"k": "v1"}))
	d := createDeployment(t, ns, "audited", podWithVolumes("audited"))
	first := hashOf(d)
	setData(t, ns, "audited", "k", "v2")
	second := docHash(t, ns, docSource{name: "audited"})
	waitStamp(t, ns, "audited", second)

	// The API server's audit log carries the webhook's audit annotation, prefixed with
	// the webhook entry's name.
	for _, h := range []string{first, second} {
		framework.Eventually(t, 20*time.Second, "audit event with config-hash "+h[:12], func() error {
			return findAudit(ns, "audited", webhook.EntryName+"/"+webhook.AuditHash, h)
		})
	}
	// configstamp's own log has one line per stamp change, with who and old -> new.
	framework.Eventually(t, 10*time.Second, "configstamp audit log line", func() error {
		var seen []string
		for _, rec := range cs.Logs() {
			if rec["msg"] != "Stamped config hash" || rec["namespace"] != ns || rec["name"] != "audited" {
				continue
			}
			seen = append(seen, fmt.Sprintf("%v %v->%v by %v", rec["operation"], rec["oldHash"], rec["newHash"], rec["user"]))
			if rec["operation"] == "UPDATE" && rec["oldHash"] == first && rec["newHash"] == second &&
				rec["user"] == "configstamp" && rec["dryRun"] == false && strings.Contains(fmt.Sprint(rec["sources"]), "configmap/audited=") {
				return nil
			}
		}
		return fmt.Errorf("no UPDATE line %s -> %s by configstamp; saw %v", first[:12], second[:12], seen)
	})
}

// findAudit looks for a Deployment audit event in ns/name whose annotation key has value.
func findAudit(ns, name, key, value string) error {
	raw, err := os.ReadFile(env.Cluster.AuditLog)
	if err != nil {
		return err
	}
	for _, line := range bytes.Split(raw, []byte("\n")) {
		if !bytes.Contains(line, []byte(value)) {
			continue
		}
		var ev struct {
			ObjectRef   struct{ Namespace, Name, Resource string }
			Annotations map[string]string
		}
		if json.Unmarshal(line, &ev) != nil {
			continue
		}
		if ev.ObjectRef.Resource == "deployments" && ev.ObjectRef.Namespace == ns && ev.ObjectRef.Name == name && ev.Annotations[key] == value {
			return nil
		}
	}
	return fmt.Errorf("no audit event for deployments %s/%s with %s=%s", ns, name, key, value)
}

func testMalformedRequest(t *testing.T, cs *framework.Configstamp) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	url := fmt.Sprintf("https://127.0.0.1:%d%s", cs.WebhookPort, webhook.Path)
	post := func(body string) (int, string) {
		resp, err := hc.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("post: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// A namespace in the scope: one outside it is answered allowed, unread (TestBounds).
	inScope := env.NewNamespace(t, true)
	review := func(obj string) string {
		r := admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{
				UID: "u1", Kind: metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
				Resource:  metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
				Operation: admissionv1.Create, Namespace: inScope, Name: "y",
				Object: runtime.RawExtension{Raw: []byte(obj)},
			},
		}
		b, _ := json.Marshal(r)
		return string(b)
	}
	cases := []struct{ name, body string }{
		{"not JSON", "{this is not json"},
		{"empty body", ""},
		{"no request", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`},
		{"object is not a Deployment", review(`{"spec":{"replicas":"many"}}`)},
	}
	for _, c := range cases {
		code, body := post(c.body)
		for deadline := time.Now().Add(10 * time.Second); strings.Contains(body, stamp.WarningScopeUnknown) && time.Now().Before(deadline); {
			// The namespace made a moment ago, not in configstamp's cache yet.
			time.Sleep(100 * time.Millisecond)
			code, body = post(c.body)
		}
		if code == http.StatusOK {
			var r admissionv1.AdmissionReview
			if err := json.Unmarshal([]byte(body), &r); err != nil || r.Response == nil || r.Response.Allowed || r.Response.Result == nil || r.Response.Result.Message == "" {
				t.Errorf("%s: want an error response with a message, got %d %s", c.name, code, body)
			}
		} else if code < 400 || body == "" {
			t.Errorf("%s: want an error response with a message, got %d %q", c.name, code, body)
		}
	}
	if !cs.Alive() {
		t.Fatal("configstamp died on malformed requests")
	}
	// And it still stamps.
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "c", map[string]string{"k": "v"}))
	d := createDeployment(t, ns, "after", podWithVolumes("c"))
	if hashOf(d) != docHash(t, ns, docSource{name: "c"}) {
		t.Fatalf("not stamped after malformed requests: %v", d.Spec.Template.Annotations)
	}
}
