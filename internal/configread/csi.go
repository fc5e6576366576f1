package configread

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
)

// csiStatusListPage is the page size of the list of one namespace's
// SecretProviderClassPodStatus objects.
const csiStatusListPage = 500

// statusList is an empty list of a source kind's Statuses (the pod statuses).
func statusList(k *stamp.SourceKind) *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetAPIVersion(k.Group + "/" + k.Version)
	l.SetKind("SecretProviderClassPodStatusList")
	return l
}

// csiContent is a SecretProviderClass as the stamp sees it: one key per object the
// driver mounts (its id) whose value is the object's version, as the driver last
// recorded them in the namespace's SecretProviderClassPodStatus objects of the class.
// Empty ("no versions yet") while no pod has mounted it; nil when the class (or its
// CRD) does not exist. keepPending: the stored stamp holds "no versions yet" for it;
// it stays so until the driver records a rotation (csiVersions).
func csiContent(ctx context.Context, r client.Reader, namespace, name string, keepPending bool) (*corev1.ConfigMap, error) {
	k := stamp.SecretProviderClass
	obj := k.New()
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, err
	}
	cm := k.Content(obj)
	var items []unstructured.Unstructured
	opts := []client.ListOption{client.InNamespace(namespace), client.Limit(csiStatusListPage)}
	for {
		list := statusList(k)
		if err := r.List(ctx, list, opts...); err != nil {
			return nil, fmt.Errorf("list %s: %w", k.Statuses, err)
		}
		items = append(items, list.Items...)
		if list.GetContinue() == "" {
			break
		}
		opts = []client.ListOption{client.InNamespace(namespace), client.Limit(csiStatusListPage), client.Continue(list.GetContinue())}
	}
	cm.Data = csiVersions(items, name, keepPending)
	return cm, nil
}

// csiVersions is the content of class from its pod statuses (items: any of the
// namespace's): the object versions of the status written last (resourceVersion
// order), as every write the driver makes records the provider's versions at that
// moment: a rotation writes the new versions, and a pod mounting after it writes them
// too, so the new pods of a workload rolled for a rotation change nothing. Empty when
// no pod has mounted the class; empty also with keepPending while no status was ever
// rewritten (generation 1: pods mounted it, no rotation since), so the first mounts of
// a workload stamped before any pod existed roll nothing.
func csiVersions(items []unstructured.Unstructured, class string, keepPending bool) map[string]string {
	var latest *unstructured.Unstructured
	rotated := false
	for i := range items {
		it := &items[i]
		if c, _, _ := unstructured.NestedString(it.Object, "status", "secretProviderClassName"); c != class {
			continue
		}
		if mounted, found, _ := unstructured.NestedBool(it.Object, "status", "mounted"); found && !mounted {
			continue
		}
		rotated = rotated || it.GetGeneration() > 1
		if latest == nil {
			latest = it
			continue
		}
		if c, err := resourceversion.CompareResourceVersion(it.GetResourceVersion(), latest.GetResourceVersion()); err == nil && c > 0 {
			latest = it
		}
	}
	data := map[string]string{}
	if latest == nil || (keepPending && !rotated) {
		return data
	}
	objects, _, _ := unstructured.NestedSlice(latest.Object, "status", "objects")
	for _, o := range objects {
		m, ok := o.(map[string]any)
		if !ok {
			continue
		}
		id, _ := m["id"].(string)
		version, _ := m["version"].(string)
		if id != "" {
			data[id] = version
		}
	}
	return data
}

// csiPending is the digest prefix (as the sources annotation shows it) of src, a
// SecretProviderClass, with no versions yet.
func csiPending(src stamp.Source, hmacKey []byte) string {
	return stamp.SourceDigest(src, &corev1.ConfigMap{}, hmacKey).Hex()[:12]
}
