// Package deployments holds the Deployment fixtures the test layers share: the
// Deployment of a pod spec, reading one back, its config hash, and waiting for a stamp.
package deployments

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/stamp"
)

// New is a Deployment of replicas pods running spec, selected by the label app=name.
func New(ns, name string, replicas int32, spec corev1.PodSpec) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
}

// Hash is the config hash stamped on the Deployment's pod template ("" when none).
func Hash(d *appsv1.Deployment) string { return d.Spec.Template.Annotations[stamp.HashAnnotation] }
