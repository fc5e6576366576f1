// Package argo holds a minimal typed Argo Rollout (argoproj.io/v1alpha1), so configstamp
// can stamp Rollouts without depending on the argo-rollouts module and all it pulls in.
package argo

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// GroupVersion is the API group and version of Argo Rollouts.
var GroupVersion = schema.GroupVersion{Group: "argoproj.io", Version: "v1alpha1"}

var schemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

// AddToScheme registers Rollout and RolloutList, so a controller-runtime client can read
// and patch them typed.
var AddToScheme = schemeBuilder.AddToScheme

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Rollout{}, &RolloutList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

var (
	_ client.Object     = &Rollout{}
	_ client.ObjectList = &RolloutList{}
)

// Rollout is an Argo Rollout with only the fields configstamp reads. JSON names match
// github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1. Decoding drops every
// other field, so configstamp never writes a Rollout whole (Update): it only sends merge
// patches, and the fields it does not know are never lost.
type Rollout struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RolloutSpec   `json:"spec"`
	Status RolloutStatus `json:"status,omitempty"`
}

// RolloutSpec is the part of a Rollout's spec that says which pods it runs.
type RolloutSpec struct {
	Replicas *int32                `json:"replicas,omitempty"`
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// Template is empty when WorkloadRef names a workload whose template the Rollout
	// runs instead, or when it does not decode (TemplateError).
	Template    corev1.PodTemplateSpec `json:"template"`
	WorkloadRef *WorkloadRef           `json:"workloadRef,omitempty"`
	// TemplateError says why the template did not decode as a pod template. Argo's CRD
	// does not check every field of it (volumes, for one, are kept as they come), so a
	// Rollout the API server accepts may not decode here: it is left alone rather than
	// failing the decode of the whole object (an informer's list would fail with it).
	TemplateError string `json:"-"`
}

// UnmarshalJSON decodes the spec, keeping a template that does not decode out of the
// way (TemplateError) instead of failing.
func (s *RolloutSpec) UnmarshalJSON(b []byte) error {
	type plain RolloutSpec // no methods: no recursion
	var raw struct {
		plain
		Template json.RawMessage `json:"template"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*s = RolloutSpec(raw.plain)
	s.Template, s.TemplateError = corev1.PodTemplateSpec{}, ""
	if len(raw.Template) > 0 && string(raw.Template) != "null" {
		if err := json.Unmarshal(raw.Template, &s.Template); err != nil {
			s.Template = corev1.PodTemplateSpec{}
			s.TemplateError = err.Error()
		}
	}
	return nil
}

// WorkloadRef names the workload (a Deployment, say) that provides a Rollout's pod template.
type WorkloadRef struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Name       string `json:"name,omitempty"`
}

// RolloutStatus is the part of a Rollout's status configstamp reads.
type RolloutStatus struct {
	// ObservedGeneration is the metadata.generation the Argo controller has seen. Argo
	// writes it as a string, not an integer as Deployments do.
	ObservedGeneration string `json:"observedGeneration,omitempty"`
	// CurrentPodHash is the rollouts-pod-template-hash of the ReplicaSet that runs the
	// current template.
	CurrentPodHash string `json:"currentPodHash,omitempty"`
	// Phase is Argo's summary of the rollout: Healthy, Progressing, Paused, Degraded.
	Phase string `json:"phase,omitempty"`
}

// RolloutList is a list of Rollouts.
type RolloutList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []Rollout `json:"items"`
}
