package watcher

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/configstamp/configstamp/internal/argo"
	"github.com/configstamp/configstamp/internal/decide"
	"github.com/configstamp/configstamp/internal/waves"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// helmTemplate is a pod template as Helm charts make them: three containers of 30 env
// variables (some selecting ConfigMap and Secret keys), envFrom, probes, resources,
// eight volumes (ConfigMap, Secret, projected, emptyDir), an init and an ephemeral
// container, pull secrets, Helm labels and annotations, and configstamp's stamp.
func helmTemplate() corev1.PodTemplateSpec {
	var t corev1.PodTemplateSpec
	t.Labels = map[string]string{"app.kubernetes.io/name": "app", "app.kubernetes.io/instance": "app-release"}
	t.Annotations = map[string]string{
		"checksum/config":         strings.Repeat("c", 64),
		"prometheus.io/scrape":    "true",
		"example.com/notes":       strings.Repeat("n", 1000), // dropped: the trimmed template keeps padding
		stamp.HashAnnotation:      strings.Repeat("a", 64),
		stamp.SourcesAnnotation:   "configmap/cfg-0=" + strings.Repeat("b", 16),
		stamp.RestartedAnnotation: "2026-01-01T00:00:00Z",
	}
	for c := range 3 {
		ct := corev1.Container{Name: fmt.Sprintf("c%d", c), Image: "registry.example.com/app:1.2.3", Args: []string{"--flag", "x"},
			Resources: corev1.ResourceRequirements{}, ReadinessProbe: &corev1.Probe{InitialDelaySeconds: 3}}
		for i := range 30 {
			e := corev1.EnvVar{Name: fmt.Sprintf("VAR_%d", i), Value: strings.Repeat("v", 40)}
			switch i % 10 {
			case 1:
				e.Value, e.ValueFrom = "", &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: fmt.Sprintf("cfg-%d", c)}, Key: fmt.Sprintf("k%d", i)}}
			case 2:
				e.Value, e.ValueFrom = "", &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "password", Optional: ptr.To(true)}}
			case 3:
				e.Value, e.ValueFrom = "", &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}
			}
			ct.Env = append(ct.Env, e)
		}
		ct.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "env-cfg"}, Optional: ptr.To(true)}}}
		t.Spec.Containers = append(t.Spec.Containers, ct)
	}
	t.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "init-sec"}}}}}}
	t.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}}}
	t.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "pull"}}
	t.Spec.Volumes = []corev1.Volume{
		{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg-0"},
			Items: []corev1.KeyToPath{{Key: "app.yaml", Path: "app.yaml"}}}}},
		{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "sec"}}},
		{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg-1"}, Optional: ptr.To(true)}},
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}},
		{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}},
	}
	for i := range 4 {
		t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: fmt.Sprintf("tmp%d", i), VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	return t
}

// helmMeta is a workload's metadata as Helm and kubectl leave it, with configstamp's
// annotations and the opt-in label.
func helmMeta(name string) metav1.ObjectMeta {
	m := clientSideApplied(name)
	m.Namespace = "ns"
	m.Labels = map[string]string{stamp.InjectLabel: stamp.InjectValue, "helm.sh/chart": "app-1.0.0", "app.kubernetes.io/managed-by": "Helm",
		waves.CanaryLabel: "true"}
	m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Thing", Name: "owner", UID: "o-1"}}
	m.Finalizers = []string{"example.com/keep"}
	for i := range 10 {
		m.Annotations[fmt.Sprintf("meta.helm.sh/annotation-%d", i)] = strings.Repeat("h", 70)
	}
	m.Annotations[stamp.ExtraSourcesAnnotation] = "configmap/extra"
	m.Annotations[stamp.ChangeCauseAnnotation] = "kubectl rollout restart"
	return m
}

// trimWorkloads are one workload of each kind, stamped and recorded, as the API server
// gives them.
func trimWorkloads() []client.Object {
	meta := helmMeta("app")
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "app"}}
	record := func(o client.Object, t *corev1.PodTemplateSpec) client.Object {
		a := o.GetAnnotations()
		a[stamp.ObservedAnnotation] = stamp.Observed{Hash: strings.Repeat("a", 64), Template: stamp.TemplateFingerprint(t), Key: "k1"}.String()
		a[stamp.KeysAnnotation] = "configmap/cfg=" + strings.Repeat("b", 12) + ":" + strings.Repeat("k=00000000,", 50) + "z=00000000"
		return o
	}
	d := &appsv1.Deployment{ObjectMeta: *meta.DeepCopy(), Spec: appsv1.DeploymentSpec{Selector: sel, Template: helmTemplate(), Replicas: ptr.To[int32](3)},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 3, Conditions: []appsv1.DeploymentCondition{{Type: "Available", Message: strings.Repeat("m", 200)}}}}
	s := &appsv1.StatefulSet{ObjectMeta: *meta.DeepCopy(), Spec: appsv1.StatefulSetSpec{Selector: sel, Template: helmTemplate(),
		UpdateStrategy:       appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType, RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To[int32](1)}},
		VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}}}},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 3, UpdateRevision: "app-2", CurrentRevision: "app-1", Replicas: 3, UpdatedReplicas: 1}}
	ds := &appsv1.DaemonSet{ObjectMeta: *meta.DeepCopy(), Spec: appsv1.DaemonSetSpec{Selector: sel, Template: helmTemplate()}, Status: appsv1.DaemonSetStatus{ObservedGeneration: 3, DesiredNumberScheduled: 4, UpdatedNumberScheduled: 1}}
	ds.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType
	ro := &argo.Rollout{ObjectMeta: *meta.DeepCopy(), Spec: argo.RolloutSpec{Selector: sel, Template: helmTemplate()}, Status: argo.RolloutStatus{ObservedGeneration: "3", CurrentPodHash: "abc"}}
	cj := &batchv1.CronJob{ObjectMeta: *meta.DeepCopy(), Spec: batchv1.CronJobSpec{Schedule: "0 0 1 1 *", Suspend: ptr.To(true),
		JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: helmTemplate()}}}, Status: batchv1.CronJobStatus{Active: []corev1.ObjectReference{{Name: "app-1"}}}}
	d.Spec.Paused = true
	return []client.Object{record(d, &d.Spec.Template), record(s, &s.Spec.Template), record(ds, &ds.Spec.Template), record(ro, &ro.Spec.Template),
		record(cj, &cj.Spec.JobTemplate.Spec.Template)}
}

// readerAnswers are the answers of every reader of a cached workload, on obj.
func readerAnswers(t *testing.T, ctx context.Context, r *workloadReconciler, obj client.Object) map[string]any {
	t.Helper()
	k := r.kind
	tmpl := k.Template(obj)
	refs := stamp.Consumed(obj.GetAnnotations(), &tmpl.Spec, r.sources)
	rec, recValid := stamp.ObservedWith(obj.GetAnnotations(), workload.TemplateFingerprint(tmpl))
	stop, _ := decide.Gate(decide.Entry{Object: obj, Refs: refs, Options: r.sources}, func() (decide.Scope, error) { return decide.InScope, nil })
	fp, fpOK := r.fingerprint(ctx, obj)
	in, err := inScope(ctx, r.client, r.scope, obj)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{
		"index":          indexSources(k, r.sources)(obj),
		"consumes":       r.consumes(obj),
		"refs":           refs,
		"fingerprint":    workload.TemplateFingerprint(tmpl),
		"record":         fmt.Sprint(rec, recValid),
		"gate":           stop,
		"recheck":        fmt.Sprint(fp, fpOK),
		"inScope":        in,
		"labelled":       r.scope.Labelled(obj.GetLabels()),
		"paused":         k.Paused(obj),
		"behind":         fmt.Sprint(k.Behind(obj)),
		"problem":        k.Problem(obj),
		"lastWrite":      workload.LastWrite(obj),
		"created":        obj.GetCreationTimestamp(),
		"generation":     obj.GetGeneration(),
		"identity":       fmt.Sprint(obj.GetUID(), obj.GetResourceVersion(), obj.GetDeletionTimestamp()),
		"stamp":          fmt.Sprint(tmpl.Annotations[stamp.HashAnnotation], "|", tmpl.Annotations[stamp.SourcesAnnotation], "|", tmpl.Annotations[stamp.RestartedAnnotation]),
		"workloadAnn":    fmt.Sprint(obj.GetAnnotations()[stamp.ObservedAnnotation], obj.GetAnnotations()[stamp.SkipAnnotation], obj.GetAnnotations()[stamp.ExtraSourcesAnnotation]),
		"changeCause":    obj.GetAnnotations()[stamp.ChangeCauseAnnotation],
		"bypassedToSelf": r.mayHaveBypassed(obj, obj),
		"health":         k.Health(obj),
		"canary":         waves.IsCanary(obj),
	}
	since, ok, err := k.PodsSince(ctx, r.client, obj)
	out["podsSince"] = fmt.Sprint(since, ok, err)
	out["stampFits"] = decide.StampFits(tmpl.Annotations, stamp.Stamp{Hash: strings.Repeat("d", 64)}, true)
	return out
}

// annotationBytes is the size of ann as the API server counts it.
func annotationBytes(ann map[string]string) int {
	n := 0
	for k, v := range ann {
		n += len(k) + len(v)
	}
	return n
}

// TestTrimmedWorkloadsAnswerAlike: every reader of a cached workload gives the same
// answers on a workload of each kind as the API server gives it and as the cache keeps
// it (TrimWorkloads, once or twice), the re-check's fingerprint included; size checks count the
// trimmed annotations as at least the whole ones and at most a little more; a change of
// the template that the trimmed form drops still moves its fingerprint; and the trimmed
// form keeps little of the template.
func TestTrimmedWorkloadsAnswerAlike(t *testing.T) {
	ctx := context.Background()
	for _, full := range trimWorkloads() {
		var k *workload.Kind
		for _, kk := range workload.All() {
			if fmt.Sprintf("%T", kk.New()) == fmt.Sprintf("%T", full) {
				k = kk
			}
		}
		for _, compact := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/compact=%v", k.Kind, compact), func(t *testing.T) {
				scheme := testScheme()
				if err := argo.AddToScheme(scheme); err != nil {
					t.Fatal(err)
				}
				// The ReplicaSet or ControllerRevision of the current template, as the kind's
				// controller makes it.
				owner := []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: k.Kind, Name: "app", UID: full.GetUID(), Controller: ptr.To(true)}}
				rsTmpl := k.Template(full).DeepCopy()
				hashLabel := appsv1.DefaultDeploymentUniqueLabelKey
				if k == workload.Rollout {
					hashLabel = "rollouts-pod-template-hash"
				}
				rsTmpl.Labels[hashLabel] = "abc"
				rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app-abc", Labels: rsTmpl.Labels, OwnerReferences: owner,
					CreationTimestamp: metav1.NewTime(created.Add(time.Minute))}, Spec: appsv1.ReplicaSetSpec{Template: *rsTmpl}}
				cr := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app-2", Labels: rsTmpl.Labels, OwnerReferences: owner,
					CreationTimestamp: metav1.NewTime(created.Add(2 * time.Minute))}, Revision: 2}
				c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(optedInNamespace(), cfgMap("1"), rs, cr).Build()
				r, _ := newTestReconciler(t, c)
				r.kind, r.sources = k, stamp.Options{Secrets: true}

				trimmed, err := TrimWorkloads(k, r.scope.Label, compact)(full.DeepCopyObject())
				if err != nil {
					t.Fatal(err)
				}
				small := trimmed.(client.Object)
				// Informers may pass an object of the cache through the transform again.
				twice, err := TrimWorkloads(k, r.scope.Label, compact)(small.DeepCopyObject())
				if err != nil {
					t.Fatal(err)
				}
				if b, err := json.Marshal(small); err != nil || strings.Contains(string(b), `"containers":[`) || strings.Contains(string(b), `"volumes":[`) || strings.Contains(string(b), `"selector":{`) {
					t.Errorf("the cache keeps decoded containers, volumes or selector (%v)", err)
				}
				if _, kept := small.GetAnnotations()[stamp.KeysAnnotation]; kept {
					t.Error("the cache keeps the keys annotation, which only the webhook reads")
				}
				want, got := readerAnswers(t, ctx, r, full), readerAnswers(t, ctx, r, small)
				again := readerAnswers(t, ctx, r, twice.(client.Object))
				for name, w := range want {
					if fmt.Sprint(got[name]) != fmt.Sprint(w) {
						t.Errorf("%s: trimmed %v, whole %v", name, got[name], w)
					}
					if fmt.Sprint(again[name]) != fmt.Sprint(w) {
						t.Errorf("%s: trimmed twice %v, whole %v", name, again[name], w)
					}
				}
				if !k.NoPods() && want["podsSince"] != fmt.Sprint(rs.CreationTimestamp.Time, true, nil) && want["podsSince"] != fmt.Sprint(cr.CreationTimestamp.Time, true, nil) {
					t.Errorf("podsSince %v: not the current ReplicaSet's or revision's creation", want["podsSince"])
				}
				if len(k.Template(small).Spec.Containers) == 0 || len(stamp.Consumed(nil, &k.Template(small).Spec, r.sources)) != 6 {
					t.Errorf("trimmed template consumes %v", stamp.Consumed(nil, &k.Template(small).Spec, r.sources))
				}
				for part, pair := range map[string][2]map[string]string{
					"metadata": {full.GetAnnotations(), small.GetAnnotations()},
					"template": {k.Template(full).Annotations, k.Template(small).Annotations},
				} {
					if w, g := annotationBytes(pair[0]), annotationBytes(pair[1]); g < w || g > w+200 {
						t.Errorf("%s annotations: trimmed count %d bytes, whole %d", part, g, w)
					}
				}
				// What the trimmed form drops still moves the fingerprints when it changes.
				changed := full.DeepCopyObject().(client.Object)
				k.Template(changed).Spec.Containers[0].Image = "registry.example.com/app:1.2.4"
				moved, _ := TrimWorkloads(k, r.scope.Label, compact)(changed)
				if workload.TemplateFingerprint(k.Template(moved.(client.Object))) == got["fingerprint"] {
					t.Error("an image change left the trimmed template's fingerprint as it was")
				}
				if r.mayHaveBypassed(small, moved.(client.Object)) != r.mayHaveBypassed(full, changed) || !r.mayHaveBypassed(full, changed) {
					t.Error("an image change: trimmed and whole disagree whether it may have bypassed the webhook")
				}
				if fp, _ := r.fingerprint(ctx, moved.(client.Object)); fmt.Sprint(fp, true) == got["recheck"] {
					t.Error("an image change left the re-check's fingerprint as it was")
				}
				// A trimmed template is a small part of the whole.
				if w, g := templateBytes(t, k.Template(full)), templateBytes(t, k.Template(small)); g*3 > w {
					t.Errorf("trimmed template %d bytes of %d", g, w)
				}
				if _, isCompact := small.(*workload.Cached); isCompact != (compact && k.Compacts()) {
					t.Errorf("cached as %T (compact %v)", small, compact)
				}
			})
		}
	}
}

func templateBytes(t *testing.T, tmpl *corev1.PodTemplateSpec) int {
	t.Helper()
	b, err := json.Marshal(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}
