package workload

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/argo"
)

// Rollout is Argo Rollouts' Rollout: its ReplicaSets carry the
// rollouts-pod-template-hash label. A Rollout with a workloadRef runs another
// workload's template and has none of its own: it is not stamped (nor is one whose
// template does not decode).
var Rollout = &Kind{
	Group: argo.GroupVersion.Group, Version: argo.GroupVersion.Version, Kind: "Rollout", Resource: "rollouts",
	ShortNames:   []string{"ro"},
	newObject:    func() client.Object { return &argo.Rollout{} },
	newList:      func() client.ObjectList { return &argo.RolloutList{} },
	templatePath: "/spec/template",
	template: func(o client.Object) *corev1.PodTemplateSpec {
		if r, ok := o.(*argo.Rollout); ok && r.Spec.WorkloadRef == nil && r.Spec.TemplateError == "" {
			return &r.Spec.Template
		}
		return nil
	},
	selector:  func(o client.Object) *metav1.LabelSelector { return o.(*argo.Rollout).Spec.Selector },
	hashLabel: "rollouts-pod-template-hash",
	health:    rolloutHealth,
	// Argo's ReplicaSet templates differ from the Rollout's (API defaults the CRD does
	// not apply; canary and blue-green metadata): the current one is the ReplicaSet of
	// status.currentPodHash, once the controller has seen the current generation.
	problem: func(o client.Object) string {
		if r, ok := o.(*argo.Rollout); ok && r.Spec.WorkloadRef == nil {
			return r.Spec.TemplateError
		}
		return ""
	},
	reduce: func(o client.Object, meta metav1.ObjectMeta, tmpl *corev1.PodTemplateSpec, sel *metav1.LabelSelector) client.Object {
		r, ok := o.(*argo.Rollout)
		if !ok {
			return o
		}
		out := &argo.Rollout{TypeMeta: r.TypeMeta, ObjectMeta: meta, Status: r.Status}
		out.Spec.Selector, out.Spec.WorkloadRef, out.Spec.TemplateError = sel, r.Spec.WorkloadRef, r.Spec.TemplateError
		if tmpl != nil {
			out.Spec.Template = *tmpl
		}
		return out
	},
	currentHash: func(o client.Object) (string, bool) {
		r := o.(*argo.Rollout)
		return r.Status.CurrentPodHash, r.Status.ObservedGeneration == strconv.FormatInt(r.Generation, 10)
	},
}
