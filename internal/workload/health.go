package workload

import (
	"fmt"
	"math"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/argo"
)

// Health is how a workload's rollout of its current template stands, read from a whole
// object or one the watcher's cache keeps (Trim keeps what it reads): Ready once it finished and is available; Failed (why) when its
// controller gave up.
type Health struct {
	Ready  bool
	Failed string
	// OwnDeadline: its controller fails a rollout that does not progress (a Deployment's
	// progressDeadlineSeconds); without one the watcher's deadline applies.
	OwnDeadline bool
}

// Health reads obj's rollout; a kind without pods of its own (a CronJob) is ready at
// once.
func (k *Kind) Health(obj client.Object) Health {
	if c, ok := cachedOf(obj); ok {
		return c.Health
	}
	if k.health == nil {
		return Health{Ready: true}
	}
	return k.health(obj)
}

func replicas(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// deploymentHealth: the controller saw the current generation, every replica is updated
// and available, and it says NewReplicaSetAvailable; ProgressDeadlineExceeded fails it.
func deploymentHealth(o client.Object) Health {
	d, ok := o.(*appsv1.Deployment)
	if !ok {
		return Health{}
	}
	// progressDeadlineSeconds MaxInt32: no deadline, and its controller keeps no
	// Progressing condition.
	own := ptrOr(d.Spec.ProgressDeadlineSeconds, 600) != math.MaxInt32
	if d.Status.ObservedGeneration < d.Generation {
		return Health{OwnDeadline: own}
	}
	var progressing *appsv1.DeploymentCondition
	for i := range d.Status.Conditions {
		if d.Status.Conditions[i].Type == appsv1.DeploymentProgressing {
			progressing = &d.Status.Conditions[i]
		}
	}
	if progressing != nil && progressing.Status == corev1.ConditionFalse && progressing.Reason == reasonDeadline {
		return Health{Failed: fmt.Sprintf("did not become available within its progressDeadlineSeconds (%d): ProgressDeadlineExceeded", ptrOr(d.Spec.ProgressDeadlineSeconds, 600)), OwnDeadline: own}
	}
	want := replicas(d.Spec.Replicas)
	s := d.Status
	return Health{Ready: s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas >= want &&
		(!own || progressing != nil && progressing.Reason == reasonAvailable), OwnDeadline: own}
}

// Reasons of a Deployment's Progressing condition that deploymentHealth reads.
const (
	reasonAvailable = "NewReplicaSetAvailable"
	reasonDeadline  = "ProgressDeadlineExceeded"
)

// deploymentHealthStatus is what deploymentHealth reads of a Deployment's status, for
// Trim: the counts and the Progressing condition's status and reason (the strings it
// reads as constants: no copy per cached Deployment).
func deploymentHealthStatus(s appsv1.DeploymentStatus) appsv1.DeploymentStatus {
	out := appsv1.DeploymentStatus{ObservedGeneration: s.ObservedGeneration, Replicas: s.Replicas, UpdatedReplicas: s.UpdatedReplicas,
		AvailableReplicas: s.AvailableReplicas}
	for _, c := range s.Conditions {
		if c.Type != appsv1.DeploymentProgressing {
			continue
		}
		kept := appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: intern(c.Status, corev1.ConditionTrue, corev1.ConditionFalse),
			Reason: intern(c.Reason, reasonAvailable, reasonDeadline)}
		out.Conditions = []appsv1.DeploymentCondition{kept} // the last, as deploymentHealth reads it
	}
	return out
}

// intern is s as the one of known it equals (a constant), else s.
func intern[S ~string](s S, known ...S) S {
	for _, k := range known {
		if s == k {
			return k
		}
	}
	return s
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

// statefulSetHealth: every replica ready, and those its controller replaces updated:
// all of them, those at or above a rollingUpdate partition, none with OnDelete (its pods
// change only when deleted).
func statefulSetHealth(o client.Object) Health {
	s, ok := o.(*appsv1.StatefulSet)
	if !ok {
		return Health{}
	}
	want, st := replicas(s.Spec.Replicas), s.Status
	updated := want
	switch u := s.Spec.UpdateStrategy; {
	case u.Type == appsv1.OnDeleteStatefulSetStrategyType:
		updated = 0
	case u.RollingUpdate != nil && u.RollingUpdate.Partition != nil && *u.RollingUpdate.Partition > 0:
		updated = max(want-*u.RollingUpdate.Partition, 0)
	}
	return Health{Ready: st.ObservedGeneration >= s.Generation && st.UpdatedReplicas >= updated && st.ReadyReplicas >= want &&
		st.Replicas == want && (updated < want || st.CurrentRevision == st.UpdateRevision)}
}

// daemonSetHealth: every scheduled pod available, and updated unless OnDelete (its pods
// change only when deleted).
func daemonSetHealth(o client.Object) Health {
	d, ok := o.(*appsv1.DaemonSet)
	if !ok {
		return Health{}
	}
	st := d.Status
	updated := d.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType || st.UpdatedNumberScheduled >= st.DesiredNumberScheduled
	return Health{Ready: st.ObservedGeneration >= d.Generation && updated && st.NumberAvailable >= st.DesiredNumberScheduled}
}

// rolloutHealth: Argo says Healthy for the current generation; Degraded fails it.
func rolloutHealth(o client.Object) Health {
	r, ok := o.(*argo.Rollout)
	if !ok || r.Status.ObservedGeneration != strconv.FormatInt(r.Generation, 10) {
		return Health{}
	}
	if r.Status.Phase == "Degraded" {
		return Health{Failed: "Argo Rollouts reports it Degraded"}
	}
	return Health{Ready: r.Status.Phase == "Healthy"}
}
