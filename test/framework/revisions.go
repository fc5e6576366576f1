package framework

import (
	"fmt"
	"sort"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
)

// StatefulSets and DaemonSets roll through ControllerRevisions: one per pod template
// they have run (a template they return to reuses its revision). Their rollouts are
// counted as the ControllerRevisions they own, on a control plane with controllers and
// kwok.

// StatefulSet reads one StatefulSet.
func (e *Env) StatefulSet(t testing.TB, ns, name string) *appsv1.StatefulSet {
	t.Helper()
	var s appsv1.StatefulSet
	if err := e.Client.Get(bg, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
		t.Fatalf("get statefulset %s/%s: %v", ns, name, err)
	}
	return &s
}

// DaemonSet reads one DaemonSet.
func (e *Env) DaemonSet(t testing.TB, ns, name string) *appsv1.DaemonSet {
	t.Helper()
	var d appsv1.DaemonSet
	if err := e.Client.Get(bg, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
		t.Fatalf("get daemonset %s/%s: %v", ns, name, err)
	}
	return &d
}

// ControllerRevisions returns the ControllerRevisions the workload controls, oldest
// (lowest revision) first.
func (e *Env) ControllerRevisions(t testing.TB, owner client.Object) []appsv1.ControllerRevision {
	t.Helper()
	var list appsv1.ControllerRevisionList
	if err := e.Client.List(bg, &list, client.InNamespace(owner.GetNamespace())); err != nil {
		t.Fatal(err)
	}
	var out []appsv1.ControllerRevision
	for _, cr := range list.Items {
		if ref := metav1.GetControllerOf(&cr); ref != nil && ref.UID == owner.GetUID() {
			out = append(out, cr)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Revision < out[j].Revision })
	return out
}

// ownedPods checks the pods the workload controls: exactly want of them, none
// terminating, every one Running, carrying the template's config hash and the
// controller-revision-hash label revision.
func (e *Env) ownedPods(owner client.Object, sel *metav1.LabelSelector, hash, revision string, want int) error {
	var pods corev1.PodList
	if err := e.Client.List(bg, &pods, client.InNamespace(owner.GetNamespace()), client.MatchingLabels(sel.MatchLabels)); err != nil {
		return err
	}
	running := 0
	for _, p := range pods.Items {
		if ref := metav1.GetControllerOf(&p); ref == nil || ref.UID != owner.GetUID() {
			continue
		}
		if p.DeletionTimestamp != nil {
			return fmt.Errorf("pod %s still terminating", p.Name)
		}
		if got := p.Annotations[stamp.HashAnnotation]; got != hash {
			return fmt.Errorf("pod %s carries hash %q, the template %q", p.Name, got, hash)
		}
		if got := p.Labels[appsv1.ControllerRevisionHashLabelKey]; got != revision {
			return fmt.Errorf("pod %s runs revision %q, want %q", p.Name, got, revision)
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pod %s is %s", p.Name, p.Status.Phase)
		}
		running++
	}
	if running != want {
		return fmt.Errorf("%d pods Running, want %d", running, want)
	}
	return nil
}

// StatefulSetRolledOut waits until the StatefulSet's rollout is complete: its controller
// has seen the current generation, its update revision is its newest ControllerRevision
// and its current one, every replica is updated, ready and available, and every pod is
// Running that revision with the template's config hash. It returns the StatefulSet.
func (e *Env) StatefulSetRolledOut(t testing.TB, ns, name string) *appsv1.StatefulSet {
	t.Helper()
	var s *appsv1.StatefulSet
	Eventually(t, 2*time.Minute, "rollout of statefulset "+name, func() error {
		s = e.StatefulSet(t, ns, name)
		want, st := *s.Spec.Replicas, s.Status
		if st.ObservedGeneration < s.Generation || st.UpdateRevision == "" || st.CurrentRevision != st.UpdateRevision ||
			st.Replicas != want || st.UpdatedReplicas != want || st.ReadyReplicas != want || st.AvailableReplicas != want {
			return fmt.Errorf("generation %d observed %d, revision current %q update %q, replicas %d updated %d ready %d available %d",
				s.Generation, st.ObservedGeneration, st.CurrentRevision, st.UpdateRevision, st.Replicas, st.UpdatedReplicas,
				st.ReadyReplicas, st.AvailableReplicas)
		}
		revs := e.ControllerRevisions(t, s)
		if len(revs) == 0 || revs[len(revs)-1].Name != st.UpdateRevision {
			return fmt.Errorf("update revision %q is not the newest of %d ControllerRevisions", st.UpdateRevision, len(revs))
		}
		return e.ownedPods(s, s.Spec.Selector, s.Spec.Template.Annotations[stamp.HashAnnotation], st.UpdateRevision, int(want))
	})
	return s
}

// DaemonSetRolledOut waits until the DaemonSet's rollout is complete: its controller has
// seen the current generation, it is scheduled on every node (and nowhere else), every
// pod is updated, ready and available, and every pod is Running its newest
// ControllerRevision with the template's config hash. It returns the DaemonSet.
func (e *Env) DaemonSetRolledOut(t testing.TB, ns, name string) *appsv1.DaemonSet {
	t.Helper()
	var nodes corev1.NodeList
	if err := e.Client.List(bg, &nodes); err != nil {
		t.Fatal(err)
	}
	var d *appsv1.DaemonSet
	Eventually(t, 2*time.Minute, "rollout of daemonset "+name, func() error {
		d = e.DaemonSet(t, ns, name)
		want, st := int32(len(nodes.Items)), d.Status
		if st.ObservedGeneration < d.Generation || st.DesiredNumberScheduled != want || st.CurrentNumberScheduled != want ||
			st.UpdatedNumberScheduled != want || st.NumberReady != want || st.NumberAvailable != want || st.NumberMisscheduled != 0 {
			return fmt.Errorf("generation %d observed %d, nodes %d desired %d scheduled %d updated %d ready %d available %d misscheduled %d",
				d.Generation, st.ObservedGeneration, want, st.DesiredNumberScheduled, st.CurrentNumberScheduled,
				st.UpdatedNumberScheduled, st.NumberReady, st.NumberAvailable, st.NumberMisscheduled)
		}
		revs := e.ControllerRevisions(t, d)
		if len(revs) == 0 {
			return fmt.Errorf("no ControllerRevision")
		}
		newest := revs[len(revs)-1].Labels[appsv1.DefaultDaemonSetUniqueLabelKey]
		return e.ownedPods(d, d.Spec.Selector, d.Spec.Template.Annotations[stamp.HashAnnotation], newest, int(want))
	})
	return d
}

// ExpectRevisions waits until the workload (obj: a *appsv1.StatefulSet or
// *appsv1.DaemonSet naming it) controls n ControllerRevisions and its rollout is
// complete, and asserts that it still controls exactly n over settle. It returns the
// workload as read after that.
func (e *Env) ExpectRevisions(t testing.TB, obj client.Object, n int, settle time.Duration) client.Object {
	t.Helper()
	ns, name := obj.GetNamespace(), obj.GetName()
	var rolledOut func() client.Object
	switch obj.(type) {
	case *appsv1.StatefulSet:
		obj = e.StatefulSet(t, ns, name)
		rolledOut = func() client.Object { return e.StatefulSetRolledOut(t, ns, name) }
	case *appsv1.DaemonSet:
		obj = e.DaemonSet(t, ns, name)
		rolledOut = func() client.Object { return e.DaemonSetRolledOut(t, ns, name) }
	default:
		t.Fatalf("ExpectRevisions: %T has no ControllerRevisions", obj)
	}
	count := func() error {
		if got := e.ControllerRevisions(t, obj); len(got) != n {
			return fmt.Errorf("%d ControllerRevisions, want %d", len(got), n)
		}
		return nil
	}
	what := fmt.Sprintf("%s has %d ControllerRevisions", name, n)
	Eventually(t, time.Minute, what, count)
	rolledOut()
	Consistently(t, settle, what, count)
	return rolledOut()
}
