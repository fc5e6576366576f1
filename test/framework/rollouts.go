package framework

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
)

// Rollouts are counted as ReplicaSets, on a control plane with controllers and kwok.

var bg = context.Background()

// Deployment reads one Deployment.
func (e *Env) Deployment(t testing.TB, ns, name string) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	if err := e.Client.Get(bg, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
		t.Fatalf("get deployment %s/%s: %v", ns, name, err)
	}
	return &d
}

// ReplicaSets returns the Deployment's ReplicaSets, oldest first.
func (e *Env) ReplicaSets(t testing.TB, d *appsv1.Deployment) []appsv1.ReplicaSet {
	t.Helper()
	var list appsv1.ReplicaSetList
	if err := e.Client.List(bg, &list, client.InNamespace(d.Namespace)); err != nil {
		t.Fatal(err)
	}
	var out []appsv1.ReplicaSet
	for _, rs := range list.Items {
		if owner := metav1.GetControllerOf(&rs); owner != nil && owner.UID == d.UID {
			out = append(out, rs)
		}
	}
	revision := func(rs *appsv1.ReplicaSet) int {
		n, _ := strconv.Atoi(rs.Annotations["deployment.kubernetes.io/revision"])
		return n
	}
	sort.Slice(out, func(i, j int) bool { return revision(&out[i]) < revision(&out[j]) })
	return out
}

// RolledOut waits until the Deployment's rollout is complete: every replica updated and
// available, old ReplicaSets scaled down, and every pod of the newest ReplicaSet Running
// with the Deployment's config hash. It returns the Deployment.
func (e *Env) RolledOut(t testing.TB, ns, name string) *appsv1.Deployment {
	t.Helper()
	var d *appsv1.Deployment
	Eventually(t, 2*time.Minute, "rollout of "+name, func() error {
		d = e.Deployment(t, ns, name)
		want := *d.Spec.Replicas
		st := d.Status
		if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != want || st.AvailableReplicas != want || st.Replicas != want {
			return fmt.Errorf("generation %d observed %d, replicas %d updated %d available %d",
				d.Generation, st.ObservedGeneration, st.Replicas, st.UpdatedReplicas, st.AvailableReplicas)
		}
		var pods corev1.PodList
		if err := e.Client.List(bg, &pods, client.InNamespace(ns), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
			return err
		}
		running := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				return fmt.Errorf("pod %s still terminating", p.Name)
			}
			if got := p.Annotations[stamp.HashAnnotation]; got != d.Spec.Template.Annotations[stamp.HashAnnotation] {
				return fmt.Errorf("pod %s carries hash %q, Deployment %q", p.Name, got, d.Spec.Template.Annotations[stamp.HashAnnotation])
			}
			if p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("pod %s is %s", p.Name, p.Status.Phase)
			}
			running++
		}
		if running != int(want) {
			return fmt.Errorf("%d pods Running, want %d", running, want)
		}
		return nil
	})
	return d
}

// ExpectReplicaSets waits until the Deployment has n ReplicaSets and its rollout is
// complete, and asserts that it still has exactly n over settle.
func (e *Env) ExpectReplicaSets(t testing.TB, ns, name string, n int, settle time.Duration) *appsv1.Deployment {
	t.Helper()
	count := func() error {
		if got := len(e.ReplicaSets(t, e.Deployment(t, ns, name))); got != n {
			return fmt.Errorf("%d ReplicaSets, want %d", got, n)
		}
		return nil
	}
	what := fmt.Sprintf("%s has %d ReplicaSets", name, n)
	Eventually(t, time.Minute, what, count)
	e.RolledOut(t, ns, name)
	Consistently(t, settle, what, count)
	return e.RolledOut(t, ns, name)
}
