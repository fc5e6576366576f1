package explain

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/argo"
	"github.com/configstamp/configstamp/internal/workload"
)

// workloadRef is a Rollout's spec.workloadRef (nil for any other workload): the
// workload whose pod template it runs. configstamp stamps that workload, not the Rollout
// (workload.Rollout has no template then); Argo rolls the Rollout when the referenced
// template changes.
func workloadRef(obj client.Object) *argo.WorkloadRef {
	if r, ok := obj.(*argo.Rollout); ok {
		return r.Spec.WorkloadRef
	}
	return nil
}

// refKind is the workload kind ref names; nil when configstamp stamps no such kind
// (or it names a Rollout, which would have no template of its own to give).
func refKind(ref *argo.WorkloadRef) *workload.Kind {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil
	}
	for _, k := range workload.All() {
		if k.Kind == ref.Kind && k.Group == gv.Group && k != workload.Rollout {
			return k
		}
	}
	return nil
}

// explainRef explains the Rollout obj by the workload its workloadRef names: that one's
// report, under the Rollout's name, its reason saying whose template it is.
func (c *Cluster) explainRef(ctx context.Context, obj client.Object, ref *argo.WorkloadRef) (Report, error) {
	k := refKind(ref)
	if k == nil || ref.Name == "" {
		r := Explain(Input{Kind: workload.Rollout, Object: obj})
		r.Reason = fmt.Sprintf("its pod template is that of %s %q (spec.workloadRef), a kind configstamp does not stamp", ref.Kind, ref.Name)
		return r, nil
	}
	of := strings.ToLower(k.Kind) + "/" + ref.Name
	r, err := c.Explain(ctx, k, obj.GetNamespace(), ref.Name)
	if err != nil {
		return Report{}, fmt.Errorf("rollout/%s runs the pod template of %s (spec.workloadRef): %w", obj.GetName(), of, err)
	}
	r.Kind, r.Name, r.TemplateOf = "rollout", obj.GetName(), of
	r.Reason = fmt.Sprintf("its pod template is %s's (spec.workloadRef), which configstamp stamps: %s", of, r.Reason)
	return r, nil
}
