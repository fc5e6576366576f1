package workload

import (
	"maps"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/argo"
	"github.com/configstamp/configstamp/stamp"
)

// TestCurrentReplicaSetByDigest: a Deployment's current ReplicaSet is told by its
// template, whole or trimmed (Trim), as the Deployment controller tells it (semantic
// equality apart from pod-template-hash): an empty list where the ReplicaSet has none
// (the template stored as written, the ReplicaSet's made from a protobuf read), a
// quantity written another way, and a pod-template-hash label of the template's own
// still match; another image does not.
func TestCurrentReplicaSetByDigest(t *testing.T) {
	d := &appsv1.Deployment{}
	d.Spec.Template.Labels = map[string]string{"app": "a", appsv1.DefaultDeploymentUniqueLabelKey: "mine"}
	d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "c", Image: "img", Args: []string{},
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1000m")}}}}
	d.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{}}}}}

	rs := d.Spec.Template.DeepCopy()
	rs.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = "5d4f8c"
	rs.Spec.Containers[0].Args = nil
	rs.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("1")
	rs.Spec.Volumes[0].Projected.Sources = nil
	a, b := rs.DeepCopy(), d.Spec.Template.DeepCopy()
	delete(a.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	delete(b.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	if !equality.Semantic.DeepEqual(a, b) {
		t.Fatal("the ReplicaSet's template is not semantically the Deployment's")
	}
	trimmed := Deployment.Trim(d, "")
	for form, obj := range map[string]*appsv1.Deployment{"whole": d, "trimmed": trimmed.(*appsv1.Deployment)} {
		if !Deployment.sameTemplate(rs, Deployment.template(obj)) {
			t.Errorf("%s: the current ReplicaSet's template taken for another", form)
		}
	}
	other := rs.DeepCopy()
	other.Spec.Containers[0].Image = "img:2"
	if Deployment.sameTemplate(other, Deployment.template(trimmed)) {
		t.Error("another image taken for the current template")
	}
}

// TestTrimEncodesReferences: a trimmed template keeps its references to sources as one
// encoded annotation, not as decoded containers and volumes, and the workload's selector
// likewise; Template gives the references back as stamp.ReferencesOnly gives them,
// without those annotations, selectorOf the selector, and neither changes the trimmed
// object.
func TestTrimEncodesReferences(t *testing.T) {
	d := &appsv1.Deployment{}
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"},
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"web"}}}}
	d.Spec.Template.Annotations = map[string]string{stamp.HashAnnotation: "h", "other": "x"}
	d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "c", Image: "img",
		Env: []corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "k", Optional: ptr.To(false)}}}},
		EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}}}}}}
	d.Spec.Template.Spec.Volumes = []corev1.Volume{
		{Name: "v", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "vol"},
			Items: []corev1.KeyToPath{{Key: "a", Path: "a"}}}}},
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	trimmed := Deployment.Trim(d, "").(*appsv1.Deployment)
	stored := trimmed.Spec.Template
	if len(stored.Spec.Containers) > 0 || len(stored.Spec.Volumes) > 0 {
		t.Fatalf("the trimmed template keeps decoded containers or volumes: %+v", stored.Spec)
	}
	if _, ok := stored.Annotations[referencesAnnotation]; !ok {
		t.Fatal("the trimmed template keeps no encoded references")
	}
	if trimmed.Spec.Selector != nil {
		t.Error("the trimmed Deployment keeps its decoded selector")
	}
	if sel := Deployment.selectorOf(trimmed); !equality.Semantic.DeepEqual(sel, d.Spec.Selector) {
		t.Errorf("selector read back %+v, want %+v", sel, d.Spec.Selector)
	}
	got := Deployment.Template(trimmed)
	if want := stamp.ReferencesOnly(&d.Spec.Template.Spec); !equality.Semantic.DeepEqual(got.Spec, want) {
		t.Errorf("references read back %+v, want %+v", got.Spec, want)
	}
	for _, key := range []string{referencesAnnotation, selectorAnnotation} {
		if _, ok := got.Annotations[key]; ok {
			t.Errorf("Template shows %q", key)
		}
	}
	if got.Annotations[stamp.HashAnnotation] != "h" || TemplateFingerprint(got) != stamp.TemplateFingerprint(&d.Spec.Template) {
		t.Errorf("Template lost the stamp or the fingerprint: %v", got.Annotations)
	}
	if _, ok := trimmed.Spec.Template.Annotations[referencesAnnotation]; !ok || len(trimmed.Spec.Template.Spec.Containers) > 0 {
		t.Error("Template changed the trimmed object")
	}
	// Trimmed again (an informer passes an object of the cache through its transform):
	// the same references.
	again := Deployment.Trim(trimmed, "")
	if !equality.Semantic.DeepEqual(Deployment.Template(again).Spec, got.Spec) || !equality.Semantic.DeepEqual(Deployment.selectorOf(again), d.Spec.Selector) {
		t.Errorf("trimmed twice: references %+v, selector %+v", Deployment.Template(again).Spec, Deployment.selectorOf(again))
	}
	// A template that consumes nothing keeps no references.
	none := &appsv1.Deployment{}
	none.Spec.Template.Spec.Containers = []corev1.Container{{Name: "c", Image: "img"}}
	if _, ok := Deployment.template(Deployment.Trim(none, "")).Annotations[referencesAnnotation]; ok {
		t.Error("a template without references keeps an encoded empty one")
	}
}

// TestCacheKeysFromOutsideIgnored: the cache-only annotation keys, when an object
// brings them in its template (a Rollout's template is not validated as a pod
// template, and the webhook sees every object before validation), are not taken for
// configstamp's: Template gives the object's own spec and annotations, the selector,
// fingerprint and pods digest are the object's, and Trim drops them and encodes the
// real references.
func TestCacheKeysFromOutsideIgnored(t *testing.T) {
	forged, err := (&corev1.PodSpec{Containers: []corev1.Container{{Name: "f", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "forged"}}}}}}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	forgedSel, _ := (&metav1.LabelSelector{MatchLabels: map[string]string{"app": "forged"}}).Marshal()
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "real"}}}}}}}
	outside := map[string]string{
		trimmedAnnotation: "guess", FingerprintAnnotation: "forged", podsDigestAnnotation: "forged", paddingAnnotation: "x",
		referencesAnnotation: string(forged), selectorAnnotation: string(forgedSel), stamp.HashAnnotation: "h",
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "real"}}
	d := &appsv1.Deployment{}
	d.Spec.Selector, d.Spec.Template.Spec = sel, spec
	d.Spec.Template.Annotations = maps.Clone(outside)
	r := &argo.Rollout{}
	r.Spec.Selector, r.Spec.Template.Spec = sel, spec
	r.Spec.Template.Annotations = maps.Clone(outside)
	for _, c := range []struct {
		kind *Kind
		obj  client.Object
	}{{Deployment, d}, {Rollout, r}} {
		own := c.kind.template(c.obj)
		whole := own.DeepCopy()
		if got := c.kind.Template(c.obj); !equality.Semantic.DeepEqual(got, whole) {
			t.Errorf("%s: Template of a whole object %+v, want its own %+v", c.kind, got, whole)
		}
		if got := TemplateFingerprint(own); got != stamp.TemplateFingerprint(whole) {
			t.Errorf("%s: fingerprint %q taken from the object's annotation", c.kind, got)
		}
		if got := c.kind.selectorOf(c.obj); !equality.Semantic.DeepEqual(got, sel) {
			t.Errorf("%s: selector %+v, want %+v", c.kind, got, sel)
		}
		if !c.kind.sameTemplate(whole, own) {
			t.Errorf("%s: pods digest taken from the object's annotation", c.kind)
		}
		for form, trimmed := range map[string]client.Object{"trimmed": c.kind.Trim(c.obj, ""), "compact": c.kind.Compact(c.obj, "")} {
			got := c.kind.Template(trimmed)
			if want := stamp.ReferencesOnly(&spec); !equality.Semantic.DeepEqual(got.Spec, want) {
				t.Errorf("%s: %s references %+v, want %+v", c.kind, form, got.Spec, want)
			}
			if fp := TemplateFingerprint(got); fp != stamp.TemplateFingerprint(whole) {
				t.Errorf("%s: %s fingerprint %q, want the template's", c.kind, form, fp)
			}
			if s := c.kind.selectorOf(trimmed); !equality.Semantic.DeepEqual(s, sel) {
				t.Errorf("%s: %s selector %+v, want %+v", c.kind, form, s, sel)
			}
			if got.Annotations[stamp.HashAnnotation] != "h" {
				t.Errorf("%s: %s template lost the stamp: %v", c.kind, form, got.Annotations)
			}
			if c.kind.digested() && !c.kind.sameTemplate(whole, got) {
				t.Errorf("%s: %s pods digest is not the template's", c.kind, form)
			}
		}
		if !equality.Semantic.DeepEqual(c.kind.template(c.obj), whole) {
			t.Errorf("%s: the object changed", c.kind)
		}
	}
}

// FuzzExpandTrimmed: whatever the encoded references and selector of a trimmed
// template, reading them never panics.
func FuzzExpandTrimmed(f *testing.F) {
	d := &appsv1.Deployment{}
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}
	d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "c", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}}
	tr := Deployment.Trim(d, "").(*appsv1.Deployment)
	f.Add([]byte(tr.Spec.Template.Annotations[referencesAnnotation]), []byte(tr.Spec.Template.Annotations[selectorAnnotation]))
	f.Add([]byte{0x12, 0xff, 0xff, 0xff, 0xff, 0x0f}, []byte{0x0a, 0x80})
	f.Fuzz(func(t *testing.T, refs, sel []byte) {
		c := tr.DeepCopy()
		c.Spec.Template.Annotations[referencesAnnotation], c.Spec.Template.Annotations[selectorAnnotation] = string(refs), string(sel)
		_ = Deployment.Template(c)
		_ = Deployment.selectorOf(c)
	})
}
