package cli

import (
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/webhook"
)

// keyNamespace and keyName hold the server's hash key of Secret digests.
const (
	keyNamespace = "configstamp-cli-keys"
	keyName      = "hash-key"
	keyRef       = keyNamespace + "/" + keyName
)

// serverArgs are the flags of every configstamp server of these tests.
var serverArgs = []string{"--secrets", "--hash-key", keyRef, "--debounce", "100ms", "--debounce-max", "1s"}

// fixture is one namespace of workloads in each state explain tells apart, stamped by a
// real configstamp server that is then stopped, so the state stays put:
//
//	current   keyRef app.a + volume files: up to date
//	partial   keyRef app2.a; app2's key b changed later: up to date, "pods do not see it"
//	changed   volume cfg; rolled once by the watcher (ConfigChanged), cfg changed again later: would roll
//	skipped   envFrom app, configstamp.io/skip=true
//	held      secretKeyRef db.password + keyRef app.a; db deleted while the server ran (ConfigMissing)
//	adopted   keyRef app.a, created before configstamp: recorded, not stamped
//	agent     DaemonSet, envFrom app
//	store     StatefulSet, projected volume: files (all keys) and app (item a)
//	outside   in a namespace that does not opt in
type fixture struct {
	in, out string
}

var (
	fixOnce sync.Once
	fix     *fixture
	fixErr  string
)

// fixtures sets the fixture up once for all tests.
func fixtures(t *testing.T) *fixture {
	t.Helper()
	fixOnce.Do(func() {
		ft := &fixtureT{T: t}
		defer func() {
			if r := recover(); r != nil && r != errFixture {
				panic(r)
			}
		}()
		fix = setup(ft)
	})
	if fix == nil {
		t.Fatalf("fixture setup failed: %s", fixErr)
	}
	return fix
}

// fixtureT lets setup fail without failing the test that happened to run it first.
type fixtureT struct{ *testing.T }

var errFixture = fmt.Errorf("fixture failed")

func (f *fixtureT) Fatalf(format string, a ...any) {
	fixErr = fmt.Sprintf(format, a...)
	f.T.Errorf("fixture setup: %s", fixErr)
	panic(errFixture)
}

func (f *fixtureT) Fatal(a ...any) { f.Fatalf("%s", fmt.Sprint(a...)) }

func setup(t *fixtureT) *fixture {
	f := &fixture{in: env.NewNamespace(t.T, true), out: env.NewNamespace(t.T, false)}
	env.CreateNamespace(t.T, keyNamespace, false)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range []client.Object{
		configMap(f.in, "app", map[string]string{"a": "1", "b": "1"}),
		configMap(f.in, "app2", map[string]string{"a": "1", "b": "1"}),
		configMap(f.in, "cfg", map[string]string{"x": "1"}),
		configMap(f.in, "files", map[string]string{"f": "1"}),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.in, Name: "db"}, Data: map[string][]byte{"password": []byte("p1")}},
		configMap(f.out, "app", map[string]string{"a": "1"}),
		deployment(f.in, "adopted", keyEnv("app", "a")),
	} {
		must(k8s.Create(bg, o))
	}
	// The webhook first (Run returns once the API server calls it), then the watcher: in
	// one process the watcher may record adopted before the API server calls the webhook
	// dev mode is registering, a bypass (a StampBypassed Event) that explain would show.
	hook, err := env.Run(bg, framework.Options{Args: append([]string{"--role", "webhook"}, serverArgs...)})
	must(err)
	srv := []*framework.Configstamp{hook}
	stopped := false
	defer func() {
		if !stopped {
			for _, p := range srv {
				p.Stop()
				t.Logf("configstamp log:\n%s", p.Output())
			}
		}
	}()
	watch, err := env.Run(bg, framework.Options{NoWebhook: true,
		Args: append([]string{"--role", "watcher", "--registration-name", webhook.DevConfigurationName}, serverArgs...)})
	must(err)
	srv = append(srv, watch)
	eventually(t, "adopted gets its record", func() error {
		d := env.Deployment(t.T, f.in, "adopted")
		if d.Annotations[stamp.ObservedAnnotation] == "" {
			return fmt.Errorf("no record yet")
		}
		return nil
	})

	skipped := deployment(f.in, "skipped", envFrom("app"))
	skipped.Annotations = map[string]string{stamp.SkipAnnotation: "true"}
	held := deployment(f.in, "held", keyEnv("app", "a"))
	held.Spec.Template.Spec.Containers[0].Env = append(held.Spec.Template.Spec.Containers[0].Env, corev1.EnvVar{
		Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password"}}})
	current := deployment(f.in, "current", keyEnv("app", "a"))
	current.Spec.Template.Spec.Volumes = []corev1.Volume{volume("files")}
	changed := deployment(f.in, "changed")
	changed.Spec.Template.Spec.Volumes = []corev1.Volume{volume("cfg")}
	store := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.in, Name: "store"},
		Spec:       appsv1.StatefulSetSpec{Selector: selector("store"), Template: template("store"), ServiceName: "store"},
	}
	store.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "files"}}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}, Items: []corev1.KeyToPath{{Key: "a", Path: "a"}}}},
		}}}}}
	agent := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.in, Name: "agent"},
		Spec:       appsv1.DaemonSetSpec{Selector: selector("agent"), Template: template("agent", envFrom("app"))},
	}
	for _, o := range []client.Object{
		current, deployment(f.in, "partial", keyEnv("app2", "a")), changed, skipped, held, store, agent,
		deployment(f.out, "outside", keyEnv("app", "a")),
	} {
		must(k8s.Create(bg, o))
	}
	for _, name := range []string{"current", "partial", "changed", "held"} {
		if env.Deployment(t.T, f.in, name).Spec.Template.Annotations[stamp.HashAnnotation] == "" {
			t.Fatalf("deployment %s was not stamped", name)
		}
	}

	// One rollout by the watcher (a ConfigChanged Event), one hold (ConfigMissing).
	before := env.Deployment(t.T, f.in, "changed").Spec.Template.Annotations[stamp.HashAnnotation]
	cfg := configMap(f.in, "cfg", map[string]string{"x": "2"})
	must(k8s.Update(bg, cfg))
	must(k8s.Delete(bg, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.in, Name: "db"}}))
	eventually(t, "changed rolled by the watcher", func() error {
		if env.Deployment(t.T, f.in, "changed").Spec.Template.Annotations[stamp.HashAnnotation] == before {
			return fmt.Errorf("stamp unchanged")
		}
		return hasEvent(f.in, "changed", "ConfigChanged")
	})
	eventually(t, "held reported", func() error { return hasEvent(f.in, "held", "ConfigMissing") })
	for _, p := range srv {
		p.Stop()
	}
	stopped = true

	// With the server stopped, nothing moves: cfg changes again (would roll), and app2
	// changes a key that partial does not consume. Both are written after the
	// workload's last write (the API server's clock counts seconds), so explain tells
	// them written since, every run.
	writeAfter(t, f.in, "changed", "cfg", "x")
	writeAfter(t, f.in, "partial", "app2", "b")
	return f
}

// writeAfter writes new values into key of ConfigMap cm until it was written after
// the Deployment's last write.
func writeAfter(t *fixtureT, ns, deployment, cm, key string) {
	i := 3
	eventually(t, cm+" written after "+deployment, func() error {
		c := &corev1.ConfigMap{}
		if err := k8s.Get(bg, client.ObjectKey{Namespace: ns, Name: cm}, c); err != nil {
			return err
		}
		c.Data[key] = fmt.Sprint(i)
		i++
		if err := k8s.Update(bg, c); err != nil {
			return err
		}
		if !workload.LastWrite(c).After(workload.LastWrite(env.Deployment(t.T, ns, deployment))) {
			return fmt.Errorf("not after yet")
		}
		return nil
	})
}

// eventually polls f until it returns nil, or fails after a generous deadline.
func eventually(t *fixtureT, what string, f func() error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func hasEvent(ns, name, reason string) error {
	var evs corev1.EventList
	if err := k8s.List(bg, &evs, client.InNamespace(ns)); err != nil {
		return err
	}
	for _, e := range evs.Items {
		if e.InvolvedObject.Name == name && e.Reason == reason {
			return nil
		}
	}
	return fmt.Errorf("no %s Event for %s yet", reason, name)
}

func configMap(ns, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
}

func selector(app string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
}

func template(app string, env ...corev1.EnvVar) corev1.PodTemplateSpec {
	c := corev1.Container{Name: "c", Image: "registry.example/app:1"}
	for _, e := range env {
		if e.Name == "" { // envFrom, as envFrom() makes it
			c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: e.Value}}})
			continue
		}
		c.Env = append(c.Env, e)
	}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{c}},
	}
}

func deployment(ns, name string, env ...corev1.EnvVar) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: selector(name), Template: template(name, env...)},
	}
}

// keyEnv is an env variable of one ConfigMap key.
func keyEnv(cm, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: "V_" + key, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: cm}, Key: key}}}
}

// envFrom stands for an envFrom of a ConfigMap (template turns it into one).
func envFrom(cm string) corev1.EnvVar { return corev1.EnvVar{Value: cm} }

func volume(cm string) corev1.Volume {
	return corev1.Volume{Name: cm, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}
}
