package faults

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/apitime"
)

var bg = context.Background()

// configMapName is the one ConfigMap of a fleet; key is the key its tests change.
const (
	configMapName = "cfg"
	key           = "k"
)

// fleet is one opted-in namespace holding a ConfigMap and n Deployments of one replica
// that each mount all of it: one edit fans out to all n.
type fleet struct {
	ns    string
	names []string
	// mode says how the fleet came to configstamp: "installed over" (created before
	// configstamp first started) or "created after".
	mode string
}

// newFleet creates a fleet in a new namespace; it does not wait for the rollouts
// (createAfter and rolledOut do). The ConfigMap is written a second before the
// Deployments (the API server's times have one-second resolution), as in a real
// release. The namespace is opted out when the test ends, after its configstamps stop.
func newFleet(t *testing.T, mode string, n int) *fleet {
	t.Helper()
	f := &fleet{ns: env.NewNamespace(t, true), mode: mode}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: configMapName}, Data: map[string]string{key: "1"}}
	if err := env.Client.Create(bg, cm); err != nil {
		t.Fatalf("create configmap in %s: %v", f.ns, err)
	}
	apitime.NextSecond()
	for i := range n {
		f.names = append(f.names, fmt.Sprintf("app-%02d", i))
	}
	parallel(t, f.names, func(name string) error { return env.Client.Create(bg, deployment(f.ns, name)) })
	atEnd(t, func() { f.optOut(t) })
	return f
}

// deployment is a Deployment of one replica that mounts the fleet's ConfigMap.
func deployment(ns, name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1",
					VolumeMounts: []corev1.VolumeMount{{Name: "cfg", MountPath: "/etc/cfg"}}}},
				Volumes: []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: configMapName}}}}},
			}},
		},
	}
}

// optOut removes the namespace's opt-in label once its test is over, so the next
// scenarios' configstamps leave it alone (cheaper than deleting its objects).
func (f *fleet) optOut(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, stamp.InjectLabel)
	if err := env.Client.Patch(bg, ns, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Logf("opt %s out: %v", f.ns, err)
	}
}

// edit sets the fleet's key to value: a change every Deployment's pods can see.
func (f *fleet) edit(t *testing.T, value string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: configMapName}}
	patch := fmt.Sprintf(`{"data":{%q:%q}}`, key, value)
	if err := env.Client.Patch(bg, cm, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatalf("edit configmap in %s: %v", f.ns, err)
	}
}

// editAll edits every fleet's ConfigMap, one fan-out of all their Deployments.
func editAll(t *testing.T, fleets []*fleet, value string) {
	t.Helper()
	for _, f := range fleets {
		f.edit(t, value)
	}
	t.Logf("edited %d ConfigMaps (fan-out of %d Deployments)", len(fleets), total(fleets))
}

func total(fleets []*fleet) int {
	n := 0
	for _, f := range fleets {
		n += len(f.names)
	}
	return n
}

// waitRecords waits until every Deployment of a fleet created before configstamp
// started carries a record of the config its pods run: it was adopted, not rolled.
func (f *fleet) waitRecords(t *testing.T) {
	t.Helper()
	framework.Eventually(t, 2*time.Minute, "records in "+f.ns, func() error {
		deps, err := f.deployments()
		if err != nil {
			return err
		}
		for _, d := range deps {
			if _, ok := stamp.ObservedFor(d.Annotations, &d.Spec.Template); !ok {
				return fmt.Errorf("%s: no valid record: %q", d.Name, d.Annotations[stamp.ObservedAnnotation])
			}
		}
		return nil
	})
}

func (f *fleet) deployments() ([]appsv1.Deployment, error) {
	var list appsv1.DeploymentList
	if err := env.Client.List(bg, &list, client.InNamespace(f.ns)); err != nil {
		return nil, err
	}
	if len(list.Items) != len(f.names) {
		return nil, fmt.Errorf("%d Deployments in %s, want %d", len(list.Items), f.ns, len(f.names))
	}
	return list.Items, nil
}

// parallel runs do for every name, eight at a time, and fails the test on any error.
func parallel(t *testing.T, names []string, do func(name string) error) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, 8)
	for _, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := do(name); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errs)
	}
}
