package bench

import (
	"context"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

// Clients returns a fast admin clientset for driving the cluster.
func Clients(env *framework.Env) *kubernetes.Clientset {
	cfg := rest.CopyConfig(env.Cluster.Config)
	cfg.QPS, cfg.Burst = 2000, 4000
	return kubernetes.NewForConfigOrDie(cfg)
}

// Namespace creates an opted-in namespace.
func Namespace(ctx context.Context, cs kubernetes.Interface, name string) error {
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{stamp.InjectLabel: stamp.InjectValue}}}, metav1.CreateOptions{})
	return err
}

// ConfigMap has one key of size bytes (distinct per name).
func ConfigMap(name string, size int) *corev1.ConfigMap {
	fill := strings.Repeat(name+"\n", size/(len(name)+1)+1)[:size]
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"config.yaml": fill}}
}

// Deployment consumes the named ConfigMaps through volumes; replicas 0: the object is
// what configstamp handles, pods are not needed.
func Deployment(name string, cms ...string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
			}},
		},
	}
	for _, cm := range cms {
		d.Spec.Template.Spec.Volumes = append(d.Spec.Template.Spec.Volumes, corev1.Volume{Name: cm,
			VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}})
	}
	return d
}
