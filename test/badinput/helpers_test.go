package badinput

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/hashkey"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/hashdoc"
	"github.com/configstamp/configstamp/test/internal/deployments"
)

var bg = context.Background()

func create(t *testing.T, obj client.Object, opts ...client.CreateOption) {
	t.Helper()
	if err := k8s.Create(bg, obj, opts...); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

func configMap(ns, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
}

// container is an app container without references.
func container(name string) corev1.Container {
	return corev1.Container{Name: name, Image: "registry.example/app:1"}
}

func deployment(ns, name string, spec corev1.PodSpec) *appsv1.Deployment {
	labels := map[string]string{"app": "app"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
}

// volume mounts a whole ConfigMap (or Secret) under the volume name vol.
func volume(vol, name string, secret bool) corev1.Volume {
	v := corev1.Volume{Name: vol}
	if secret {
		v.Secret = &corev1.SecretVolumeSource{SecretName: name}
	} else {
		v.ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}
	}
	return v
}

func getDeployment(t *testing.T, ns, name string) *appsv1.Deployment {
	t.Helper()
	return deployments.Get(t, k8s, ns, name)
}

func hashOf(d *appsv1.Deployment) string { return deployments.Hash(d) }

// waitStamp waits until the Deployment carries want as its config hash.
func waitStamp(t *testing.T, ns, name, want string) *appsv1.Deployment {
	t.Helper()
	return deployments.WaitStamp(t, k8s, 60*time.Second, ns, name, want)
}

// docHash recomputes the config hash from docs/hash.md (test/hashdoc), independently of
// the stamp package, from the sources as they are now.
func (s *suite) docHash(t *testing.T, ns string, srcs ...hashdoc.Source) string {
	t.Helper()
	return hashdoc.Keyed(srcs, func(secret bool, name string) *corev1.ConfigMap {
		if !secret {
			var cm corev1.ConfigMap
			if err := k8s.Get(bg, client.ObjectKey{Namespace: ns, Name: name}, &cm); err != nil {
				return nil
			}
			return &cm
		}
		var sec corev1.Secret
		if err := k8s.Get(bg, client.ObjectKey{Namespace: ns, Name: name}, &sec); err != nil {
			return nil
		}
		cm := &corev1.ConfigMap{Data: map[string]string{}}
		for k, v := range sec.Data {
			cm.Data[k] = string(v)
		}
		return cm
	}, s.key, ns)
}

// readKey reads the 32-byte HMAC key configstamp keeps in keyNS/hash-key.
func readKey(t *testing.T) []byte {
	t.Helper()
	var sec corev1.Secret
	framework.Eventually(t, 30*time.Second, "hash key", func() error {
		return k8s.Get(bg, client.ObjectKey{Namespace: keyNS, Name: "hash-key"}, &sec)
	})
	key := sec.Data[hashkey.DataKey]
	if len(key) != 32 {
		t.Fatalf("hash key holds %d bytes, want 32", len(key))
	}
	return key
}

// freeAddr is 127.0.0.1 on a free port.
func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// podWithVolumes mounts each named ConfigMap whole in one app container.
func podWithVolumes(names ...string) corev1.PodSpec {
	spec := corev1.PodSpec{Containers: []corev1.Container{container("app")}}
	for i, n := range names {
		vol := fmt.Sprintf("v%d", i)
		spec.Volumes = append(spec.Volumes, volume(vol, n, false))
		spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: vol, MountPath: "/etc/" + vol})
	}
	return spec
}

// cmSource is a ConfigMap a volume mounts whole.
func cmSource(name string) hashdoc.Source { return hashdoc.Source{Name: name} }

// dryRun asks the API server what it would store of d, through the webhook.
func dryRun(t *testing.T, d *appsv1.Deployment) *appsv1.Deployment {
	t.Helper()
	d = d.DeepCopy()
	create(t, d, client.DryRunAll)
	return d
}
