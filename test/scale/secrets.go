package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/configstamp/configstamp/stamp"
)

// hashKeyNamespace and hashKeyName name the Secret holding configstamp's HMAC key of
// Secret digests when the measurement runs it with --secrets (the chart's default name).
const (
	hashKeyNamespace = "configstamp"
	hashKeyName      = "configstamp-hash-key"
)

// secretArgs are the flags that make configstamp hash Secrets; the key's namespace must
// exist (configstamp creates the Secret).
func secretArgs(ctx context.Context, cs kubernetes.Interface) ([]string, error) {
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hashKeyNamespace}}, metav1.CreateOptions{})
	return []string{"--secrets", "--hash-key", hashKeyNamespace + "/" + hashKeyName}, err
}

// multiKeySecret holds the same data as multiKeyConfigMap of the same name and size.
func multiKeySecret(name string, size int) *corev1.Secret {
	sec := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{},
	}
	for k, v := range multiKeyConfigMap(name, size).Data {
		sec.Data[k] = []byte(v)
	}
	return sec
}

// secretDeployment consumes the named Secret through a secret volume (replicas 0, like
// deployment).
func secretDeployment(name, secret string) *appsv1.Deployment {
	d := deployment(name)
	d.Spec.Template.Spec.Volumes = append(d.Spec.Template.Spec.Volumes, corev1.Volume{Name: secret,
		VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}})
	return d
}

// appliedSecret creates sec the way client-side apply does: its JSON (data in base64, as
// kubectl applies a manifest with data) in the last-applied annotation, field manager
// kubectl-client-side-apply. As with ConfigMaps, a Secret too large for the annotation
// cannot be applied client-side; the nearest possible state is created: as many keys
// as fit are applied, and a second manager adds the rest.
func appliedSecret(ctx context.Context, cs kubernetes.Interface, ns string, sec *corev1.Secret) error {
	applied, rest, err := fitLastAppliedSecret(sec, ns)
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, applied, metav1.CreateOptions{FieldManager: csaManager}); err != nil {
		return err
	}
	if len(rest) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"data": rest})
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Secrets(ns).Patch(ctx, sec.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: laterManager})
	return err
}

// reapplySecret changes one key of sec as a second client-side `kubectl apply` does: the
// change and the new last-applied annotation in one patch.
func reapplySecret(ctx context.Context, cs kubernetes.Interface, ns string, sec *corev1.Secret, key, value string) error {
	sec = sec.DeepCopy()
	sec.Data[key] = []byte(value)
	applied, _, err := fitLastAppliedSecret(sec, ns)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{
		"data":     map[string][]byte{key: []byte(value)},
		"metadata": map[string]any{"annotations": applied.Annotations},
	})
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Secrets(ns).Patch(ctx, sec.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: csaManager})
	return err
}

// fitLastAppliedSecret is fitLastApplied for a Secret. The annotation grows with the
// keys it holds, so the most that fit are found by bisection (a Secret's JSON, in
// base64, is slow to encode a hundred times over).
func fitLastAppliedSecret(sec *corev1.Secret, ns string) (*corev1.Secret, map[string][]byte, error) {
	keys := slices.Sorted(maps.Keys(sec.Data))
	annotated := func(n int) (*corev1.Secret, bool, error) {
		applied := sec.DeepCopy()
		applied.Data = map[string][]byte{}
		for _, k := range keys[:n] {
			applied.Data[k] = sec.Data[k]
		}
		ann, err := lastApplied(applied, ns)
		if err != nil {
			return nil, false, err
		}
		applied.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: ann}
		return applied, len(corev1.LastAppliedConfigAnnotation)+len(ann) <= annotationLimit, nil
	}
	lo, hi := 0, len(keys) // the most keys that fit is in [lo, hi]
	for lo < hi {
		mid := (lo + hi + 1) / 2
		_, fits, err := annotated(mid)
		if err != nil {
			return nil, nil, err
		}
		if fits {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo == 0 {
		return nil, nil, fmt.Errorf("secret %s: no key fits the annotation limit", sec.Name)
	}
	applied, _, err := annotated(lo)
	if err != nil {
		return nil, nil, err
	}
	rest := map[string][]byte{}
	for _, k := range keys[lo:] {
		rest[k] = sec.Data[k]
	}
	return applied, rest, nil
}

// describeAppliedSecret is describeApplied for a Secret (content counted in bytes, the
// annotation holds it in base64).
func describeAppliedSecret(ctx context.Context, cs kubernetes.Interface, ns, name string) (string, error) {
	sec, err := cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	content := 0
	for k, v := range sec.Data {
		content += len(k) + len(v)
	}
	what, err := describeAppliedMeta(&sec.ObjectMeta, content, len(sec.Data))
	if err != nil {
		return "", err
	}
	var applied struct{ Data map[string]string }
	if err := json.Unmarshal([]byte(sec.Annotations[corev1.LastAppliedConfigAnnotation]), &applied); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s; last-applied holds %d of the %d keys (in base64)", what, len(applied.Data), len(sec.Data)), nil
}

// createSource creates the memory measurement's source name of kind (stamp.KindConfigMap
// or stamp.KindSecret), size bytes, written plainly or as client-side apply writes it.
func createSource(ctx context.Context, cs kubernetes.Interface, ns, kind, name string, size int, write string) error {
	if kind == stamp.KindSecret {
		sec := multiKeySecret(name, size)
		if write == writeClientSideApply {
			return appliedSecret(ctx, cs, ns, sec)
		}
		_, err := cs.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{})
		return err
	}
	cm := multiKeyConfigMap(name, size)
	if write == writeClientSideApply {
		return appliedConfigMap(ctx, cs, ns, cm)
	}
	_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	return err
}

// changeSource changes one key of a source createSource made (client-side apply: a
// re-apply, so the annotation changes too).
func changeSource(ctx context.Context, cs kubernetes.Interface, ns, kind, name string, size int, write string) error {
	switch {
	case kind == stamp.KindSecret && write == writeClientSideApply:
		return reapplySecret(ctx, cs, ns, multiKeySecret(name, size), "changed", "yes")
	case kind == stamp.KindSecret:
		_, err := cs.CoreV1().Secrets(ns).Patch(ctx, name, types.MergePatchType,
			[]byte(`{"data":{"changed":"eWVz"}}`), metav1.PatchOptions{}) // "yes"
		return err
	case write == writeClientSideApply:
		return reapplyConfigMap(ctx, cs, ns, multiKeyConfigMap(name, size), "changed", "yes")
	}
	_, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType,
		[]byte(`{"data":{"changed":"yes"}}`), metav1.PatchOptions{})
	return err
}

// sourceName is how the tables name one source of a kind; sourceNames, several.
func sourceName(kind string) string {
	if kind == stamp.KindSecret {
		return "Secret"
	}
	return "ConfigMap"
}

func sourceNames(kind string) string { return sourceName(kind) + "s" }
