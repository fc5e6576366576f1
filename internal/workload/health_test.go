package workload

import (
	"math"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/argo"
)

func deployment(gen, observed int64, updated, available, total int32, reason string, status corev1.ConditionStatus) *appsv1.Deployment {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: gen}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)},
		Status: appsv1.DeploymentStatus{ObservedGeneration: observed, UpdatedReplicas: updated, AvailableReplicas: available, Replicas: total}}
	if reason != "" {
		d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: status, Reason: reason}}
	}
	return d
}

func noDeadline(d *appsv1.Deployment) *appsv1.Deployment {
	d.Spec.ProgressDeadlineSeconds = ptr.To[int32](math.MaxInt32)
	return d
}

// Only a Deployment with a progress deadline has one of its own: the waves deadline
// applies to the others.
func TestHealthOwnDeadline(t *testing.T) {
	if !Deployment.Health(deployment(2, 2, 1, 2, 3, "ReplicaSetUpdated", corev1.ConditionTrue)).OwnDeadline {
		t.Error("a Deployment with progressDeadlineSeconds: no deadline of its own")
	}
	if Deployment.Health(noDeadline(deployment(2, 2, 1, 2, 3, "", ""))).OwnDeadline {
		t.Error("a Deployment with progressDeadlineSeconds MaxInt32: a deadline of its own")
	}
	if StatefulSet.Health(&appsv1.StatefulSet{}).OwnDeadline {
		t.Error("a StatefulSet: a deadline of its own")
	}
}

// TestHealth: each kind's health, the same from the object the watcher's cache keeps
// (Trim, Compact).
func TestHealth(t *testing.T) {
	for _, c := range []struct {
		name   string
		kind   *Kind
		obj    client.Object
		ready  bool
		failed bool
	}{
		{"deployment available", Deployment, deployment(2, 2, 2, 2, 2, "NewReplicaSetAvailable", corev1.ConditionTrue), true, false},
		{"deployment not observed", Deployment, deployment(3, 2, 2, 2, 2, "NewReplicaSetAvailable", corev1.ConditionTrue), false, false},
		{"deployment rolling", Deployment, deployment(2, 2, 1, 2, 3, "ReplicaSetUpdated", corev1.ConditionTrue), false, false},
		{"deployment old pods left", Deployment, deployment(2, 2, 2, 2, 3, "NewReplicaSetAvailable", corev1.ConditionTrue), false, false},
		{"deployment past its deadline", Deployment, deployment(2, 2, 1, 2, 3, "ProgressDeadlineExceeded", corev1.ConditionFalse), false, true},
		{"deployment past its deadline, not observed", Deployment, deployment(3, 2, 1, 2, 3, "ProgressDeadlineExceeded", corev1.ConditionFalse), false, false},
		{"statefulset ready", StatefulSet, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2)},
			Status: appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, CurrentRevision: "b", UpdateRevision: "b"}}, true, false},
		// The status of the generation before (the watcher's nudge not yet seen by its
		// controller): not ready, also trimmed.
		{"statefulset not observed", StatefulSet, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 3}, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2)},
			Status: appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, CurrentRevision: "b", UpdateRevision: "b"}}, false, false},
		{"statefulset rolling", StatefulSet, &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2)},
			Status: appsv1.StatefulSetStatus{Replicas: 2, UpdatedReplicas: 1, ReadyReplicas: 2, CurrentRevision: "a", UpdateRevision: "b"}}, false, false},
		{"daemonset ready", DaemonSet, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Generation: 2},
			Status: appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 3, UpdatedNumberScheduled: 3, NumberAvailable: 3}}, true, false},
		{"daemonset not observed", DaemonSet, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Generation: 3},
			Status: appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 3, UpdatedNumberScheduled: 3, NumberAvailable: 3}}, false, false},
		{"daemonset not updated", DaemonSet, &appsv1.DaemonSet{Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 3, UpdatedNumberScheduled: 2, NumberAvailable: 3}}, false, false},
		{"daemonset rolling", DaemonSet, &appsv1.DaemonSet{Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 3, UpdatedNumberScheduled: 3, NumberAvailable: 2}}, false, false},
		{"rollout healthy", Rollout, &argo.Rollout{ObjectMeta: metav1.ObjectMeta{Generation: 4}, Status: argo.RolloutStatus{ObservedGeneration: "4", Phase: "Healthy"}}, true, false},
		{"rollout healthy, not observed", Rollout, &argo.Rollout{ObjectMeta: metav1.ObjectMeta{Generation: 5}, Status: argo.RolloutStatus{ObservedGeneration: "4", Phase: "Healthy"}}, false, false},
		{"rollout degraded", Rollout, &argo.Rollout{ObjectMeta: metav1.ObjectMeta{Generation: 4}, Status: argo.RolloutStatus{ObservedGeneration: "4", Phase: "Degraded"}}, false, true},
		{"cronjob: no pods", CronJob, &batchv1.CronJob{}, true, false},
		// No progress deadline (MaxInt32): no Progressing condition; ready on its counts.
		{"deployment without a progress deadline, available", Deployment, noDeadline(deployment(2, 2, 2, 2, 2, "", "")), true, false},
		{"deployment without a progress deadline, rolling", Deployment, noDeadline(deployment(2, 2, 1, 2, 3, "", "")), false, false},
		// A partition keeps the pods below it on the old revision: those above it count.
		{"statefulset partitioned, rolled above it", StatefulSet, &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3),
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To[int32](2)}}},
			Status: appsv1.StatefulSetStatus{Replicas: 3, UpdatedReplicas: 1, ReadyReplicas: 3, CurrentRevision: "a", UpdateRevision: "b"}}, true, false},
		{"statefulset partitioned, not rolled above it", StatefulSet, &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3),
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To[int32](2)}}},
			Status: appsv1.StatefulSetStatus{Replicas: 3, UpdatedReplicas: 0, ReadyReplicas: 3, CurrentRevision: "a", UpdateRevision: "b"}}, false, false},
		// OnDelete: its pods change only when deleted; ready pods are all it can show.
		{"statefulset OnDelete, ready", StatefulSet, &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2),
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}},
			Status: appsv1.StatefulSetStatus{Replicas: 2, UpdatedReplicas: 0, ReadyReplicas: 2, CurrentRevision: "a", UpdateRevision: "b"}}, true, false},
		{"daemonset OnDelete, available", DaemonSet, &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}},
			Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 3, UpdatedNumberScheduled: 0, NumberAvailable: 3}}, true, false},
		{"daemonset OnDelete, unavailable", DaemonSet, &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}},
			Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 3, UpdatedNumberScheduled: 0, NumberAvailable: 2}}, false, false},
	} {
		h := c.kind.Health(c.obj)
		if h.Ready != c.ready || (h.Failed != "") != c.failed {
			t.Errorf("%s: %+v, want ready %v failed %v", c.name, h, c.ready, c.failed)
		}
		// The watcher's cache keeps a trimmed object (the waves gate reads its health).
		if trimmed := c.kind.Health(c.kind.Trim(c.obj)); trimmed != h {
			t.Errorf("%s, trimmed: %+v, whole %+v", c.name, trimmed, h)
		}
		// Informers may pass a cached object through the transform again.
		if twice := c.kind.Health(c.kind.Trim(c.kind.Trim(c.obj))); twice != h {
			t.Errorf("%s, trimmed twice: %+v, whole %+v", c.name, twice, h)
		}
		// A cluster-wide cache keeps a Cached of the kinds that compact (health precomputed).
		if compact := c.kind.Health(c.kind.Compact(c.obj)); compact != h {
			t.Errorf("%s, compact: %+v, whole %+v", c.name, compact, h)
		}
		if twice := c.kind.Health(c.kind.Compact(c.kind.Compact(c.obj))); twice != h {
			t.Errorf("%s, compact twice: %+v, whole %+v", c.name, twice, h)
		}
	}
}
