package configread

import (
	"context"
	"fmt"
	"sync"

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
	l.SetKind(k.StatusKind + "List")
	return l
}

// csiContent is a SecretProviderClass as the stamp sees it: one key per object the
// driver mounts (its id) whose value is the object's version, as csiVersions picks them
// from the namespace's SecretProviderClassPodStatus objects of the class. Empty ("no
// versions yet") while no rotation was recorded; nil when the class (or its CRD) does
// not exist. keeps (nil: no stored stamp) reports whether versions give the digest the
// stored stamp holds for the class.
func csiContent(ctx context.Context, r client.Reader, namespace, name string, keeps func(map[string]string) bool) (*corev1.ConfigMap, error) {
	return (&statusesOnce{}).content(ctx, r, namespace, name, keeps)
}

// statusesOnce lists a namespace's pod statuses once for all the classes one stamp reads
// (they are read at once, each in its own goroutine).
type statusesOnce struct {
	once    sync.Once
	byClass map[string][]podStatus
	err     error
}

// content is csiContent, with the namespace's statuses listed at the first call.
func (s *statusesOnce) content(ctx context.Context, r client.Reader, namespace, name string, keeps func(map[string]string) bool) (*corev1.ConfigMap, error) {
	k := stamp.SecretProviderClass
	obj := k.New()
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, err
	}
	s.once.Do(func() { s.byClass, s.err = listStatuses(ctx, r, namespace) })
	if s.err != nil {
		return nil, s.err
	}
	cm := k.Content(obj)
	cm.Data = csiVersions(s.byClass[name], keeps)
	return cm, nil
}

// listStatuses lists namespace's pod statuses, by class. Only what the mounted ones
// record is kept, page by page: a namespace may hold thousands of statuses, and the
// webhook reads them at each admission.
func listStatuses(ctx context.Context, r client.Reader, namespace string) (map[string][]podStatus, error) {
	k := stamp.SecretProviderClass
	out := map[string][]podStatus{}
	opts := []client.ListOption{client.InNamespace(namespace), client.Limit(csiStatusListPage)}
	for {
		list := statusList(k)
		if err := r.List(ctx, list, opts...); err != nil {
			return nil, fmt.Errorf("list %s: %w", k.Statuses, err)
		}
		for i := range list.Items {
			if class, st, ok := mountedStatus(&list.Items[i]); ok {
				out[class] = append(out[class], st)
			}
		}
		if list.GetContinue() == "" {
			return out, nil
		}
		opts = []client.ListOption{client.InNamespace(namespace), client.Limit(csiStatusListPage), client.Continue(list.GetContinue())}
	}
}

// podStatus is what csiVersions reads of one SecretProviderClassPodStatus.
type podStatus struct {
	resourceVersion string
	generation      int64
	versions        map[string]string // object id -> version
}

// mountedStatus is the class a pod status records a mount of, and what csiVersions reads
// of it; false when it records no mount.
func mountedStatus(it *unstructured.Unstructured) (string, podStatus, bool) {
	class, _, _ := unstructured.NestedString(it.Object, "status", "secretProviderClassName")
	if mounted, found, _ := unstructured.NestedBool(it.Object, "status", "mounted"); class == "" || (found && !mounted) {
		return "", podStatus{}, false
	}
	return class, podStatus{it.GetResourceVersion(), it.GetGeneration(), statusVersions(it)}, true
}

// csiVersions is the content of a class from its pod statuses. The driver writes a
// status at a pod's mount (generation 1) and rewrites its versions at a rotation
// (generation > 1: the CRD has no status subresource). Only a rotation moves the
// content, to the versions of the latest rotated status (resourceVersion order); a
// mount never does (a provider may give each pod its own versions, e.g. Vault dynamic
// secrets: following mounts would roll without end). So: the stored versions (keeps)
// are kept while a status written at or after the latest rotation still shows them (a
// new pod mounting the rotated versions, or a late rotation of another pod, changes
// nothing, and an old rotation left behind by a finished pod cannot take the stamp
// back); else the latest rotation's versions; else, with no rotation at all, empty
// ("no versions yet").
func csiVersions(statuses []podStatus, keeps func(map[string]string) bool) map[string]string {
	var rotated *podStatus
	for i := range statuses {
		if st := &statuses[i]; st.generation > 1 && (rotated == nil || newer(st, rotated)) {
			rotated = st
		}
	}
	if keeps != nil {
		for i := range statuses {
			if st := &statuses[i]; (rotated == nil || !newer(rotated, st)) && keeps(st.versions) {
				return st.versions
			}
		}
	}
	if rotated == nil {
		return map[string]string{}
	}
	return rotated.versions
}

// newer reports whether a was written after b (resourceVersion order; false when
// either cannot be compared).
func newer(a, b *podStatus) bool {
	c, err := resourceversion.CompareResourceVersion(a.resourceVersion, b.resourceVersion)
	return err == nil && c > 0
}

// statusVersions is the object versions a pod status records (id -> version).
func statusVersions(st *unstructured.Unstructured) map[string]string {
	data := map[string]string{}
	objects, _, _ := unstructured.NestedSlice(st.Object, "status", "objects")
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

// csiKeeps reports whether versions of src, a SecretProviderClass, give stored (its
// digest prefix in a stored sources annotation); nil when nothing is stored or there is
// no key.
func csiKeeps(src stamp.Source, hmacKey []byte, stored string) func(map[string]string) bool {
	if stored == "" || len(hmacKey) == 0 {
		return nil
	}
	return func(versions map[string]string) bool {
		return stamp.SourceDigest(src, &corev1.ConfigMap{Data: versions}, hmacKey).Hex()[:12] == stored
	}
}
