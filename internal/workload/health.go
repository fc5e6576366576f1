package workload

import (
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/argo"
)

// Health is how a workload's rollout of its current template stands, read from a full
// (untrimmed) object: Ready once it finished and is available; Failed (why) when its
// controller gave up.
type Health struct {
	Ready  bool
	Failed string
}

// Health reads obj's rollout; a kind without pods of its own (a CronJob) is ready at
// once.
func (k *Kind) Health(obj client.Object) Health {
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
	if d.Status.ObservedGeneration < d.Generation {
		return Health{}
	}
	var progressing *appsv1.DeploymentCondition
	for i := range d.Status.Conditions {
		if d.Status.Conditions[i].Type == appsv1.DeploymentProgressing {
			progressing = &d.Status.Conditions[i]
		}
	}
	if progressing != nil && progressing.Status == corev1.ConditionFalse && progressing.Reason == "ProgressDeadlineExceeded" {
		return Health{Failed: fmt.Sprintf("did not become available within its progressDeadlineSeconds (%d): ProgressDeadlineExceeded", ptrOr(d.Spec.ProgressDeadlineSeconds, 600))}
	}
	want := replicas(d.Spec.Replicas)
	s := d.Status
	return Health{Ready: s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas >= want &&
		progressing != nil && progressing.Reason == "NewReplicaSetAvailable"}
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

// statefulSetHealth: every replica updated and ready on the current revision.
func statefulSetHealth(o client.Object) Health {
	s, ok := o.(*appsv1.StatefulSet)
	if !ok {
		return Health{}
	}
	want, st := replicas(s.Spec.Replicas), s.Status
	return Health{Ready: st.ObservedGeneration >= s.Generation && st.UpdatedReplicas >= want && st.ReadyReplicas >= want &&
		st.Replicas == want && (st.CurrentRevision == st.UpdateRevision || s.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType)}
}

// daemonSetHealth: every scheduled pod updated and available.
func daemonSetHealth(o client.Object) Health {
	d, ok := o.(*appsv1.DaemonSet)
	if !ok {
		return Health{}
	}
	st := d.Status
	return Health{Ready: st.ObservedGeneration >= d.Generation && st.UpdatedNumberScheduled >= st.DesiredNumberScheduled &&
		st.NumberAvailable >= st.DesiredNumberScheduled}
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
