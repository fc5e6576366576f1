package watcher

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var (
	created = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t1      = metav1.NewTime(created.Add(time.Hour))
	t2      = metav1.NewTime(created.Add(2 * time.Hour))
	t3      = metav1.NewTime(created.Add(3 * time.Hour))
)

// clientSideApplied is the metadata client-side `kubectl apply` leaves: the whole object
// in an annotation, and managedFields naming every key, written by several managers.
func clientSideApplied(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: name, Namespace: "ns", ResourceVersion: "42", UID: "u-1", Generation: 3,
		CreationTimestamp: metav1.NewTime(created),
		Labels:            map[string]string{"app": name},
		Annotations: map[string]string{
			corev1.LastAppliedConfigAnnotation: `{"apiVersion":"v1","data":{"config.yaml":"` + strings.Repeat("x", 4096) + `"}}`,
			"configstamp.io/ignore":            "false",
		},
		ManagedFields: []metav1.ManagedFieldsEntry{
			{Manager: "kubectl-client-side-apply", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &t2,
				FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:data":{"f:config.yaml":{}}}`)},
			{Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &t3,
				FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:data":{"f:other":{}}}`)},
			{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, Time: &t1, Subresource: "status"},
			{Manager: "no-time"},
		},
	}
}

// trimmedMeta is what TrimForCache should leave of clientSideApplied(name).
func trimmedMeta(name string) metav1.ObjectMeta {
	m := clientSideApplied(name)
	m.Annotations = map[string]string{"configstamp.io/ignore": "false"}
	m.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: LatestWriteManager, Time: &t3}}
	return m
}

// sourceTrimmed is what TrimForCache should leave of clientSideApplied(name) as the
// metadata of a ConfigMap or Secret: no labels, no annotation but the ignore one.
func sourceTrimmed(name string) metav1.ObjectMeta {
	m := trimmedMeta(name)
	m.Labels = nil
	return m
}

// withToolCopy adds the copy of the whole object another tool (kapp) keeps.
func withToolCopy(m metav1.ObjectMeta) metav1.ObjectMeta {
	m.Annotations["kapp.k14s.io/original"] = `{"data":{"password":"aHVudGVyMg=="}}`
	return m
}

func configMapMeta(m metav1.ObjectMeta) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: m}
}

func testDeployment(m metav1.ObjectMeta) *appsv1.Deployment {
	labels := map[string]string{"app": m.Name}
	return &appsv1.Deployment{
		ObjectMeta: m,
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{
					"configstamp.io/config-hash": "abc",
					// Only the object's own annotation goes, not one in the template.
					corev1.LastAppliedConfigAnnotation: "template copy",
				}},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "app", Image: "app:1",
						EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}}}},
					Volumes: []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "cm2"}}}}},
				},
			},
		},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 2, ReadyReplicas: 2},
	}
}

func unstructuredOf(t *testing.T, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func TestTrimForCache(t *testing.T) {
	onlyLastApplied := clientSideApplied("only")
	onlyLastApplied.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: "{}"}
	onlyLastAppliedWant := sourceTrimmed("only")
	onlyLastAppliedWant.Annotations = nil

	noTimes := clientSideApplied("no-times")
	for i := range noTimes.ManagedFields {
		noTimes.ManagedFields[i].Time = nil
	}
	noTimesWant := sourceTrimmed("no-times")
	noTimesWant.ManagedFields = nil

	plain := metav1.ObjectMeta{Name: "plain", Namespace: "ns", CreationTimestamp: metav1.NewTime(created),
		Annotations: map[string]string{"configstamp.io/ignore": "true"}}

	// The waves settings and command stay (waves off costs no live read); others go.
	wavesOn := clientSideApplied("waves")
	wavesOn.Annotations["configstamp.io/waves"] = "1,50%"
	wavesOn.Annotations["configstamp.io/waves-threshold"] = "3"
	wavesOn.Annotations["configstamp.io/waves-deadline"] = "4h"
	wavesOn.Annotations["configstamp.io/waves-command"] = "halt configmap/waves=0123456789ab"
	wavesOn.Annotations["configstamp.io/waves-other"] = "x"
	wavesHuge := clientSideApplied("waves-huge") // a crafted value is not kept
	wavesHuge.Annotations["configstamp.io/waves"] = strings.Repeat("1,", 1<<16)
	wavesHugeWant := sourceTrimmed("waves-huge")
	wavesOnWant := sourceTrimmed("waves")
	wavesOnWant.Annotations = map[string]string{"configstamp.io/ignore": "false", "configstamp.io/waves": "1,50%", "configstamp.io/waves-threshold": "3",
		"configstamp.io/waves-deadline": "4h", "configstamp.io/waves-command": "halt configmap/waves=0123456789ab"}

	tests := []struct {
		name    string
		in, out any
	}{
		{"configmap metadata", configMapMeta(clientSideApplied("cm")), configMapMeta(sourceTrimmed("cm"))},
		{"configmap metadata: waves annotations kept", configMapMeta(wavesOn), configMapMeta(wavesOnWant)},
		{"configmap metadata: a huge waves annotation not kept", configMapMeta(wavesHuge), configMapMeta(wavesHugeWant)},
		{"secret metadata: no copy of it kept by any tool",
			&metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: withToolCopy(clientSideApplied("s"))},
			&metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: sourceTrimmed("s")}},
		{"namespace metadata keeps its labels",
			&metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: clientSideApplied("nm")},
			&metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: trimmedMeta("nm")}},
		{"namespace", &corev1.Namespace{ObjectMeta: clientSideApplied("n")}, &corev1.Namespace{ObjectMeta: trimmedMeta("n")}},
		{"namespace metadata keeps its waves annotations (the gate's namespace settings)",
			&metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: withNamespaceWaves(clientSideApplied("nw"))},
			&metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: withNamespaceWaves(trimmedMeta("nw"))}},
		{"deployment: spec, status, labels, other annotations kept", testDeployment(clientSideApplied("d")), testDeployment(trimmedMeta("d"))},
		{"only annotation is last-applied", configMapMeta(onlyLastApplied), configMapMeta(onlyLastAppliedWant)},
		{"managed fields without times", configMapMeta(noTimes), configMapMeta(noTimesWant)},
		{"nothing to trim", configMapMeta(plain), configMapMeta(plain)},
		{"tombstone", toolscache.DeletedFinalStateUnknown{Key: "ns/d", Obj: testDeployment(clientSideApplied("d"))},
			toolscache.DeletedFinalStateUnknown{Key: "ns/d", Obj: testDeployment(trimmedMeta("d"))}},
		{"tombstone without object", toolscache.DeletedFinalStateUnknown{Key: "ns/x"}, toolscache.DeletedFinalStateUnknown{Key: "ns/x"}},
		{"tombstone of an unknown type", toolscache.DeletedFinalStateUnknown{Key: "ns/x", Obj: 7}, toolscache.DeletedFinalStateUnknown{Key: "ns/x", Obj: 7}},
		{"nil", nil, nil},
		{"typed nil", (*appsv1.Deployment)(nil), (*appsv1.Deployment)(nil)},
		{"unknown type", "a string", "a string"},
		{"struct without metadata", struct{ A int }{1}, struct{ A int }{1}},
	}
	trimFn := TrimForCache()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := trimFn(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.out) {
				t.Fatalf("got  %#v\nwant %#v", got, tt.out)
			}
			again, err := trimFn(got)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(again, tt.out) {
				t.Fatalf("not idempotent: second pass gave %#v", again)
			}
		})
	}
}

func TestTrimForCacheUnstructured(t *testing.T) {
	in := unstructuredOf(t, testDeployment(clientSideApplied("d")))
	in.SetAPIVersion("apps/v1")
	in.SetKind("Deployment")
	want := unstructuredOf(t, testDeployment(trimmedMeta("d")))
	want.SetAPIVersion("apps/v1")
	want.SetKind("Deployment")
	got, err := TrimForCache()(in)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
}

// TestTrimForCacheKeepsLastWrite: the watcher's lastWrite gives the same answer after
// the transform, whichever of creation time and managed-fields times is latest.
func TestTrimForCacheKeepsLastWrite(t *testing.T) {
	late := metav1.NewTime(created.Add(10 * time.Hour))
	tests := []struct {
		name    string
		created metav1.Time
		mf      []metav1.ManagedFieldsEntry
	}{
		{"no managed fields", metav1.NewTime(created), nil},
		{"latest first", metav1.NewTime(created), []metav1.ManagedFieldsEntry{{Manager: "a", Time: &t3}, {Manager: "b", Time: &t1}}},
		{"latest last", metav1.NewTime(created), []metav1.ManagedFieldsEntry{{Manager: "a", Time: &t1}, {Manager: "b", Time: &t2}, {Manager: "c", Time: &t3}}},
		{"entries without time", metav1.NewTime(created), []metav1.ManagedFieldsEntry{{Manager: "a"}, {Manager: "b", Time: &t2}, {Manager: "c"}}},
		{"no times at all", metav1.NewTime(created), []metav1.ManagedFieldsEntry{{Manager: "a"}}},
		{"created after every write", late, []metav1.ManagedFieldsEntry{{Manager: "a", Time: &t1}}},
		{"already trimmed", metav1.NewTime(created), []metav1.ManagedFieldsEntry{{Manager: LatestWriteManager, Time: &t2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, obj := range []client.Object{
				configMapMeta(metav1.ObjectMeta{Name: "cm", CreationTimestamp: tt.created, ManagedFields: tt.mf}),
				testDeployment(metav1.ObjectMeta{Name: "d", CreationTimestamp: tt.created, ManagedFields: tt.mf}),
			} {
				want := lastWrite(obj)
				out, err := TrimForCache()(obj)
				if err != nil {
					t.Fatal(err)
				}
				if got := lastWrite(out.(client.Object)); !got.Equal(want) {
					t.Errorf("%T: lastWrite after trim = %v, before %v", obj, got, want)
				}
				if n := len(out.(client.Object).GetManagedFields()); n > 1 {
					t.Errorf("%T: %d managed fields entries kept, want at most 1", obj, n)
				}
			}
		})
	}
}

// TestTrimForCacheDoesNotWriteTrimmed: an object already trimmed (as one in the cache,
// or inside a tombstone) is not written to, so readers of the cache never race with it.
func TestTrimForCacheDoesNotWriteTrimmed(t *testing.T) {
	obj := configMapMeta(trimmedMeta("cm"))
	ann, mf := obj.Annotations, obj.ManagedFields
	if _, err := TrimForCache()(toolscache.DeletedFinalStateUnknown{Key: "ns/cm", Obj: obj}); err != nil {
		t.Fatal(err)
	}
	if reflect.ValueOf(obj.Annotations).Pointer() != reflect.ValueOf(ann).Pointer() || &obj.ManagedFields[0] != &mf[0] {
		t.Fatal("an already trimmed object was written to")
	}
}

// TestTrimForCacheHelmRelease: the cache keeps of a HelmRelease what the watcher reads
// (metadata, valuesFrom, suspend), not its inline values (a password here), chart or
// status; the object handed in is not written, and a trimmed one passes as it is.
func TestTrimForCacheHelmRelease(t *testing.T) {
	valuesFrom := []helmv2.ValuesReference{{Kind: "ConfigMap", Name: "values", ValuesKey: "prod.yaml", Optional: true}}
	hr := &helmv2.HelmRelease{ObjectMeta: clientSideApplied("app"), Spec: helmv2.HelmReleaseSpec{
		Interval: metav1.Duration{Duration: time.Minute}, Suspend: true, ValuesFrom: valuesFrom,
		Chart: &helmv2.HelmChartTemplate{Spec: helmv2.HelmChartTemplateSpec{Chart: "app"}},
	}, Status: helmv2.HelmReleaseStatus{ObservedGeneration: 3, LastAttemptedRevision: "1.0.0"}}
	hr.Labels = map[string]string{"team": "a"}
	if err := json.Unmarshal([]byte(`{"spec":{"values":{"password":"hunter2"}}}`), hr); err != nil || hr.Spec.Values == nil {
		t.Fatalf("inline values: %v", err)
	}
	out, err := TrimForCache()(hr)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := out.(*helmv2.HelmRelease)
	if !ok {
		t.Fatalf("got %T", out)
	}
	want := helmv2.HelmReleaseSpec{Suspend: true, ValuesFrom: valuesFrom}
	if !reflect.DeepEqual(got.Spec, want) || !reflect.DeepEqual(got.Status, helmv2.HelmReleaseStatus{}) {
		t.Errorf("kept spec %+v, status %+v; want only valuesFrom and suspend", got.Spec, got.Status)
	}
	if got.Name != "app" || got.ResourceVersion != "42" || got.Labels["team"] != "a" || hasKey(got.Annotations, corev1.LastAppliedConfigAnnotation) {
		t.Errorf("metadata %+v", got.ObjectMeta)
	}
	if hr.Spec.Values == nil || hr.Status.ObservedGeneration != 3 || !hasKey(hr.Annotations, corev1.LastAppliedConfigAnnotation) {
		t.Error("the object handed in was written to")
	}
	if again, _ := TrimForCache()(got); again != any(got) {
		t.Error("a trimmed HelmRelease was copied again")
	}
}

// withNamespaceWaves is m with a namespace's waves annotations.
func withNamespaceWaves(m metav1.ObjectMeta) metav1.ObjectMeta {
	m.Annotations["configstamp.io/waves"] = "1,50%"
	m.Annotations["configstamp.io/waves-threshold"] = "3"
	m.Annotations["configstamp.io/waves-deadline"] = "20m"
	return m
}
