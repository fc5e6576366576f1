package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// How the memory measurement writes its objects.
const (
	writePlain = "plain"
	// writeClientSideApply writes them the way client-side `kubectl apply` (and Argo CD
	// without server-side apply) does: the object's JSON in the last-applied-configuration
	// annotation, field manager kubectl-client-side-apply, so managedFields name every key.
	writeClientSideApply = "client-side-apply"
)

const (
	// csaManager is the field manager of client-side `kubectl apply`.
	csaManager = "kubectl-client-side-apply"
	// laterManager adds the keys of a ConfigMap too large for last-applied.
	laterManager = "config-generator"
	// annotationLimit is the API server's limit on the total size of an object's
	// annotations (keys and values).
	annotationLimit = 256 << 10
	// memoryKeySize is the size of each key of the memory measurement's ConfigMaps,
	// so that managedFields name many keys.
	memoryKeySize = 10 << 10
)

// multiKeyConfigMap has size bytes of data in keys of memoryKeySize bytes (distinct per
// name and key).
func multiKeyConfigMap(name string, size int) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Data:       map[string]string{},
	}
	for i := 0; size > 0; i++ {
		n := min(size, memoryKeySize)
		key := fmt.Sprintf("part-%04d.yaml", i)
		line := name + "/" + key + "\n"
		cm.Data[key] = strings.Repeat(line, n/len(line)+1)[:n]
		size -= n
	}
	return cm
}

// lastApplied is what client-side `kubectl apply` stores in the annotation: the object
// as applied, with an empty annotations map, encoded as JSON with sorted keys.
func lastApplied(obj runtime.Object, namespace string) (string, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return "", err
	}
	md, _ := u["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
		u["metadata"] = md
	}
	delete(md, "creationTimestamp")
	md["annotations"] = map[string]any{}
	md["namespace"] = namespace
	delete(u, "status")
	raw, err := json.Marshal(u)
	if err != nil {
		return "", err
	}
	return string(raw) + "\n", nil
}

// appliedConfigMap creates cm the way client-side apply does. A ConfigMap whose JSON
// does not fit the annotation limit cannot be applied client-side at all (kubectl and
// Argo CD fail with "metadata.annotations: Too long"); the nearest possible state is
// created instead: as many keys as fit are applied, and a second manager adds the rest.
func appliedConfigMap(ctx context.Context, cs kubernetes.Interface, ns string, cm *corev1.ConfigMap) error {
	applied, rest, err := fitLastApplied(cm, ns)
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, applied, metav1.CreateOptions{FieldManager: csaManager}); err != nil {
		return err
	}
	if len(rest) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"data": rest})
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().ConfigMaps(ns).Patch(ctx, cm.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: laterManager})
	return err
}

// reapplyConfigMap changes one key of cm as a second client-side `kubectl apply` does:
// the change and the new last-applied annotation in one patch.
func reapplyConfigMap(ctx context.Context, cs kubernetes.Interface, ns string, cm *corev1.ConfigMap, key, value string) error {
	cm = cm.DeepCopy()
	cm.Data[key] = value
	applied, _, err := fitLastApplied(cm, ns)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{
		"data":     map[string]string{key: value},
		"metadata": map[string]any{"annotations": applied.Annotations},
	})
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().ConfigMaps(ns).Patch(ctx, cm.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: csaManager})
	return err
}

// fitLastApplied returns cm reduced to the most keys (in key order) whose last-applied
// annotation fits the limit, annotated with it, and the keys left out.
func fitLastApplied(cm *corev1.ConfigMap, ns string) (*corev1.ConfigMap, map[string]string, error) {
	keys := slices.Sorted(maps.Keys(cm.Data))
	applied := cm.DeepCopy()
	for n := len(keys); n > 0; n-- {
		applied.Data = map[string]string{}
		for _, k := range keys[:n] {
			applied.Data[k] = cm.Data[k]
		}
		ann, err := lastApplied(applied, ns)
		if err != nil {
			return nil, nil, err
		}
		if len(corev1.LastAppliedConfigAnnotation)+len(ann) <= annotationLimit {
			applied.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: ann}
			rest := map[string]string{}
			for _, k := range keys[n:] {
				rest[k] = cm.Data[k]
			}
			return applied, rest, nil
		}
	}
	return nil, nil, fmt.Errorf("configmap %s: no key fits the annotation limit", cm.Name)
}

// appliedDeployment creates d the way client-side apply does.
func appliedDeployment(ctx context.Context, cs kubernetes.Interface, ns string, d *appsv1.Deployment) error {
	d.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
	ann, err := lastApplied(d, ns)
	if err != nil {
		return err
	}
	d.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: ann}
	_, err = cs.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{FieldManager: csaManager})
	return err
}

// describeApplied says how much of a ConfigMap's content its last-applied annotation
// and managedFields hold, as the API server stored them.
func describeApplied(ctx context.Context, cs kubernetes.Interface, ns, name string) (string, error) {
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	content := 0
	for k, v := range cm.Data {
		content += len(k) + len(v)
	}
	return describeAppliedMeta(&cm.ObjectMeta, content, len(cm.Data))
}

// describeAppliedMeta says how much of an object's content (content bytes in keys
// data keys) its last-applied annotation and managedFields hold.
func describeAppliedMeta(meta *metav1.ObjectMeta, content, keys int) (string, error) {
	ann := len(meta.Annotations[corev1.LastAppliedConfigAnnotation])
	named, managers := 0, []string{}
	for _, mf := range meta.ManagedFields {
		managers = append(managers, mf.Manager)
		if mf.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Data map[string]any `json:"f:data"`
		}
		if err := json.Unmarshal(mf.FieldsV1.Raw, &fields); err != nil {
			return "", err
		}
		for k := range fields.Data {
			if k != "." { // the map itself
				named++
			}
		}
	}
	return fmt.Sprintf("last-applied %d KiB (%.0f%% of the %d KiB content); managedFields: %d entries (%s) naming %d of %d keys",
		ann>>10, 100*float64(ann)/float64(content), content>>10, len(meta.ManagedFields), strings.Join(managers, ", "), named, keys), nil
}
