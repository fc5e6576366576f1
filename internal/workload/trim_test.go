package workload

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
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
