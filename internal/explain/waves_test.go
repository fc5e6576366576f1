package explain

import (
	"bytes"
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/configstamp/configstamp/internal/argo"
	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/waves"
	"github.com/configstamp/configstamp/stamp"
)

func TestApplyWaves(t *testing.T) {
	for _, c := range []struct {
		name    string
		verdict string
		notes   []WavesNote
		want    string
		reason  string
		roll    bool
	}{
		{name: "held", verdict: VerdictWouldRoll, notes: []WavesNote{{Note: "wave 1 of 3 for configmap/a"}, {Held: "held: waiting for wave 2 of 3 for configmap/b (wave 1 rolling: deployment/x)"}},
			want: VerdictHeldInWaves, reason: "changed; but held: waiting for wave 2 of 3 for configmap/b (wave 1 rolling: deployment/x)"},
		{name: "in its wave", verdict: VerdictWouldRoll, notes: []WavesNote{{Note: "wave 1 of 3 for configmap/a"}},
			want: VerdictWouldRoll, reason: "changed (wave 1 of 3 for configmap/a)", roll: true},
		{name: "none", verdict: VerdictWouldRoll, want: VerdictWouldRoll, reason: "changed", roll: true},
		{name: "not rolling anyway", verdict: VerdictHeld, notes: []WavesNote{{Held: "halted: x"}}, want: VerdictHeld, reason: "changed"},
	} {
		r := Report{Verdict: c.verdict, Reason: "changed", Roll: c.verdict == VerdictWouldRoll}
		applyWaves(&r, c.notes)
		if r.Verdict != c.want || r.Reason != c.reason || r.Roll != c.roll {
			t.Errorf("%s: %s %q roll %v; want %s %q roll %v", c.name, r.Verdict, r.Reason, r.Roll, c.want, c.reason, c.roll)
		}
	}
}

func TestWriteImpactWaves(t *testing.T) {
	r := ImpactReport{Kind: "configmap", Namespace: "ns", Name: "shared", Workloads: []Consumer{{Kind: "deployment", Name: "a"}},
		Waves: &WavesPlan{Steps: "1,10%,50%", Threshold: 5, Sizes: []int{1, 1, 3, 11, 5}, Change: "configmap/shared=abc", Current: 2, Halted: "deployment/a did not become available: x"}}
	var b bytes.Buffer
	if err := WriteImpact(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"A change of it rolls its consumers in 5 waves (docs/waves.md): the first consumer as canary first, then steps 1,10%,50%, the rest last; sizes 1, 1, 3, 11, 5.",
		"Its change configmap/shared=abc is halted in wave 2: deployment/a did not become available: x.",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("impact text lacks %q:\n%s", want, b.String())
		}
	}
	r.Waves.Halted, r.Waves.Canaries = "", 1
	b.Reset()
	_ = WriteImpact(&b, r)
	if !strings.Contains(b.String(), "1 canary (configstamp.io/canary=true) first") || !strings.Contains(b.String(), "is rolling: wave 2 of 5") {
		t.Errorf("impact text:\n%s", b.String())
	}
}

// TestWavesGated: the sources the watcher's gate asks waves about (waveHold: stored
// digest not the one wanted), a template without a stamp among them.
func TestWavesGated(t *testing.T) {
	for _, c := range []struct {
		s    Source
		want bool
	}{
		{Source{Kind: "configmap", Status: StatusChanged, Stamped: "a", Current: "b"}, true},
		{Source{Kind: "secret", Status: StatusAdded, Current: "b"}, true},
		{Source{Kind: "configmap", Status: StatusNotStamped, Current: "b"}, true},
		{Source{Kind: "configmap", Status: StatusNotStamped, Stamped: "b", Current: "b"}, false},
		{Source{Kind: "configmap", Status: StatusUnchanged, Stamped: "b", Current: "b"}, false},
		{Source{Kind: "configmap", Status: StatusRemoved, Stamped: "b"}, false},
		{Source{Kind: "secretproviderclass", Status: StatusChanged, Stamped: "a", Current: "b"}, false},
	} {
		if got := wavesGated(c.s); got != c.want {
			t.Errorf("wavesGated(%+v) = %v, want %v", c.s, got, c.want)
		}
	}
}

// A workload that failed its wave of the current change of a source says so (the
// change is halted); a failure of an earlier change says nothing.
func TestWavesFailed(t *testing.T) {
	sc, err := scope.New(stamp.InjectLabel, nil)
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{stamp.InjectLabel: stamp.InjectValue}}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "shared", Annotations: map[string]string{waves.Annotation: "on"}},
		Data: map[string]string{"a": "1"}}
	nsKey := stamp.NamespaceKey([]byte(strings.Repeat("k", 32)), "ns")
	change := waves.ChangeOf(stamp.KindConfigMap, "shared", cm, nsKey)
	for _, tc := range []struct {
		name, change string
		says         bool
	}{
		{name: "this change", change: change, says: true},
		{name: "an earlier change", change: "configmap/shared=000000000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "e", Annotations: map[string]string{
				waves.FailedAnnotation: waves.FailedRecord("deployment/e", tc.change, "did not become available: ProgressDeadlineExceeded")}}}
			d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "c", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "shared"}}}}}}
			scheme := runtime.NewScheme()
			if err := clientgoscheme.AddToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			if err := argo.AddToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			c := &Cluster{Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(ns, cm, d).Build(), Scope: sc}
			r := Report{Namespace: "ns", Verdict: "up-to-date", Reason: "up to date", Sources: []Source{{Kind: stamp.KindConfigMap, Name: "shared"}}}
			c.wavesFailed(context.Background(), ns, true, d, &r, nsKey)
			if got := strings.Contains(r.Reason, "it failed its wave of change "+change+" (did not become available: ProgressDeadlineExceeded)"); got != tc.says {
				t.Errorf("reason %q: says it failed %v, want %v", r.Reason, got, tc.says)
			}
		})
	}
}

// The namespace's waves annotations are read from the live Namespace, as the watcher
// reads them from its cache (waves.Resolve): its steps over its label's off; a bad
// threshold there is warned of, the flag's kept.
func TestPlanNamespaceAnnotations(t *testing.T) {
	sc, err := scope.New(stamp.InjectLabel, nil)
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns",
		Labels:      map[string]string{stamp.InjectLabel: stamp.InjectValue, waves.Annotation: "off"},
		Annotations: map[string]string{waves.Annotation: "2", waves.ThresholdAnnotation: "many"}}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "shared"}, Data: map[string]string{"a": "1"}}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var warned []string
	c := &Cluster{Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(ns, cm).Build(), Scope: sc,
		Waves: waves.Settings{Threshold: 1}, Warn: func(s string) { warned = append(warned, s) }}
	e, err := c.plan(context.Background(), nil, ns, true, "ns", stamp.SourceKindNamed(stamp.KindConfigMap), "shared", func() []byte { return nil })
	if err != nil || e == nil {
		t.Fatalf("plan %+v, error %v: want waves on by the namespace's annotation", e, err)
	}
	if len(e.settings.Steps) != 1 || e.settings.Steps[0].N != 2 || e.settings.Threshold != 1 {
		t.Errorf("settings %+v: want the namespace's steps 2, the flag's threshold 1", e.settings)
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "namespace: configstamp.io/waves-threshold") {
		t.Errorf("warnings %q: want the namespace's bad threshold", warned)
	}
}
