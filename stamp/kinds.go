package stamp

import (
	"maps"
	"strings"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Source kind names. The name is part of the hash encoding, so a ConfigMap and a Secret
// of one name never share an encoding.
const (
	KindConfigMap           = "configmap"
	KindSecret              = "secret"
	KindSecretProviderClass = "secretproviderclass"
)

// CSIDriver is the Secrets Store CSI driver's name in a pod's csi volumes, and
// CSIClassAttribute the volume attribute naming the SecretProviderClass it mounts.
const (
	CSIDriver         = "secrets-store.csi.k8s.io"
	CSIClassAttribute = "secretProviderClass"
)

// SourceKind is one kind of object whose content a pod consumes.
type SourceKind struct {
	// Name names it in stamps and annotations ("configmap"): the sources annotation,
	// extra-sources, the hash encoding, index keys, metric labels, explain's "kind/name".
	Name string
	// Group, Version, Kind and Resource (plural) name it in the API, for reads, watches
	// and permissions (get, list, watch); Kind also in messages ("Secret digests").
	Group, Version, Kind, Resource string
	// Statuses, when set, is a resource of the same group whose objects carry the
	// kind's content (the CSI driver's pod statuses): read, listed and watched with it;
	// StatusKind is their kind.
	Statuses, StatusKind string
	// Aliases are what a user may type for it on the command line.
	Aliases []string
	// Flag turns the kind on ("": always on); Plural names it in messages about it.
	Flag, Plural string
	// Coverage is its key in CoverageAnnotation ("": covered since the registration's
	// creation).
	Coverage string

	counts    func(Options) bool
	newObject func() Object
	content   func(Object) *corev1.ConfigMap
	// How a pod spec references it: nil where it cannot.
	volume    func(*corev1.Volume) (podRef, bool)
	projected func(*corev1.VolumeProjection) (podRef, bool)
	envFrom   func(*corev1.EnvFromSource) (podRef, bool)
	keyRef    func(*corev1.EnvVarSource) (podRef, bool)
}

// Object is an API object of a source kind, as a client reads one (client.Object).
type Object interface {
	metav1.Object
	runtime.Object
}

// podRef is one reference of a pod spec to a source: the keys a volume selects (items),
// or the key an env variable selects.
type podRef struct {
	name     string
	items    []corev1.KeyToPath
	key      string
	optional *bool
}

// Counts reports whether sources of the kind count under opts (its Flag is on).
func (k *SourceKind) Counts(opts Options) bool { return k.counts == nil || k.counts(opts) }

// GVK is the kind's GroupVersionKind.
func (k *SourceKind) GVK() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: k.Group, Version: k.Version, Kind: k.Kind}
}

// New returns an empty object of the kind, to read one into.
func (k *SourceKind) New() Object { return k.newObject() }

// NewMeta returns an empty metadata-only object of the kind.
func (k *SourceKind) NewMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(k.GVK())
	return m
}

// Content is obj as the stamp sees it: its keys as a ConfigMap's data (and binaryData),
// with its metadata. nil for nil.
func (k *SourceKind) Content(obj Object) *corev1.ConfigMap { return k.content(obj) }

// The source kinds.
var (
	ConfigMap = &SourceKind{
		Name: KindConfigMap, Version: "v1", Kind: "ConfigMap", Resource: "configmaps", Plural: "ConfigMaps",
		Aliases:   []string{"configmap", "configmaps", "cm"},
		newObject: func() Object { return &corev1.ConfigMap{} },
		content: func(o Object) *corev1.ConfigMap {
			cm, _ := o.(*corev1.ConfigMap)
			return cm
		},
		volume: func(v *corev1.Volume) (podRef, bool) {
			if s := v.ConfigMap; s != nil {
				return podRef{name: s.Name, items: s.Items, optional: s.Optional}, true
			}
			return podRef{}, false
		},
		projected: func(p *corev1.VolumeProjection) (podRef, bool) {
			if s := p.ConfigMap; s != nil {
				return podRef{name: s.Name, items: s.Items, optional: s.Optional}, true
			}
			return podRef{}, false
		},
		envFrom: func(e *corev1.EnvFromSource) (podRef, bool) {
			if s := e.ConfigMapRef; s != nil {
				return podRef{name: s.Name, optional: s.Optional}, true
			}
			return podRef{}, false
		},
		keyRef: func(e *corev1.EnvVarSource) (podRef, bool) {
			if s := e.ConfigMapKeyRef; s != nil {
				return podRef{name: s.Name, key: s.Key, optional: s.Optional}, true
			}
			return podRef{}, false
		},
	}
	Secret = &SourceKind{
		Name: KindSecret, Version: "v1", Kind: "Secret", Resource: "secrets", Plural: "Secrets",
		Aliases: []string{"secret", "secrets"},
		Flag:    "--secrets", Coverage: CoverageSecrets,
		counts:    func(o Options) bool { return o.Secrets },
		newObject: func() Object { return &corev1.Secret{} },
		content: func(o Object) *corev1.ConfigMap {
			sec, _ := o.(*corev1.Secret)
			cm := SecretContent(sec)
			if cm != nil {
				// Only a manifest has stringData: merged in as the API server does.
				maps.Copy(cm.Data, sec.StringData)
			}
			return cm
		},
		volume: func(v *corev1.Volume) (podRef, bool) {
			if s := v.Secret; s != nil {
				return podRef{name: s.SecretName, items: s.Items, optional: s.Optional}, true
			}
			return podRef{}, false
		},
		projected: func(p *corev1.VolumeProjection) (podRef, bool) {
			if s := p.Secret; s != nil {
				return podRef{name: s.Name, items: s.Items, optional: s.Optional}, true
			}
			return podRef{}, false
		},
		envFrom: func(e *corev1.EnvFromSource) (podRef, bool) {
			if s := e.SecretRef; s != nil {
				return podRef{name: s.Name, optional: s.Optional}, true
			}
			return podRef{}, false
		},
		keyRef: func(e *corev1.EnvVarSource) (podRef, bool) {
			if s := e.SecretKeyRef; s != nil {
				return podRef{name: s.Name, key: s.Key, optional: s.Optional}, true
			}
			return podRef{}, false
		},
	}
	// SecretProviderClass is a class of the Secrets Store CSI driver a csi volume mounts.
	// Its content is not the object's: it is the object versions the driver records in
	// the class's SecretProviderClassPodStatus objects (configread reads them), keyed as
	// every digest is. Only a volume can reference it.
	SecretProviderClass = &SourceKind{
		Name: KindSecretProviderClass, Group: "secrets-store.csi.x-k8s.io", Version: "v1",
		Kind: "SecretProviderClass", Resource: "secretproviderclasses", Plural: "SecretProviderClasses",
		Statuses: "secretproviderclasspodstatuses", StatusKind: "SecretProviderClassPodStatus",
		Aliases: []string{"secretproviderclass", "secretproviderclasses", "spc"},
		Flag:    "--csi-secrets",
		counts:  func(o Options) bool { return o.CSISecrets },
		// Read metadata-only: configread makes its content from the pod statuses.
		newObject: func() Object {
			m := &metav1.PartialObjectMetadata{}
			m.SetGroupVersionKind(schema.GroupVersionKind{Group: "secrets-store.csi.x-k8s.io", Version: "v1", Kind: "SecretProviderClass"})
			return m
		},
		content: func(o Object) *corev1.ConfigMap {
			if o == nil {
				return nil
			}
			m, _ := o.(*metav1.PartialObjectMetadata)
			if m == nil {
				return nil
			}
			return &corev1.ConfigMap{ObjectMeta: m.ObjectMeta, Data: map[string]string{}}
		},
		volume: func(v *corev1.Volume) (podRef, bool) {
			if s := v.CSI; s != nil && s.Driver == CSIDriver {
				// The driver needs the class: its volume is never optional.
				return podRef{name: s.VolumeAttributes[CSIClassAttribute]}, true
			}
			return podRef{}, false
		},
	}
)

// SecretContent is a Secret as the stamp sees it: every key of its data as a data key
// (env and volumes both see all of a Secret's data), with its metadata. nil for nil.
// The values alias the Secret's bytes rather than copy them (a Secret of 1 MiB is not
// held twice): sec's data must not change while the result is in use.
func SecretContent(sec *corev1.Secret) *corev1.ConfigMap {
	if sec == nil {
		return nil
	}
	cm := &corev1.ConfigMap{ObjectMeta: sec.ObjectMeta, Data: make(map[string]string, len(sec.Data))}
	for k, v := range sec.Data {
		cm.Data[k] = unsafe.String(unsafe.SliceData(v), len(v))
	}
	return cm
}

// sourceKinds are the source kinds, in Name order (the encoding sorts sources so too):
// controllers, permissions and messages follow it.
var sourceKinds = []*SourceKind{ConfigMap, Secret, SecretProviderClass}

// SourceKinds returns the source kinds, in Name order.
func SourceKinds() []*SourceKind { return sourceKinds }

// SourceKindNamed returns the source kind of this Name, nil when none.
func SourceKindNamed(name string) *SourceKind {
	for _, k := range sourceKinds {
		if k.Name == name {
			return k
		}
	}
	return nil
}

// FindSourceKind returns the source kind with this API group and kind, nil when none.
func FindSourceKind(group, kind string) *SourceKind {
	for _, k := range sourceKinds {
		if k.Group == group && k.Kind == kind {
			return k
		}
	}
	return nil
}

// FindStatusKind is the source kind whose Statuses are objects of group and kind, or nil.
func FindStatusKind(group, kind string) *SourceKind {
	for _, k := range sourceKinds {
		if k.StatusKind != "" && k.Group == group && k.StatusKind == kind {
			return k
		}
	}
	return nil
}

// SourceNames lists the Names of the source kinds as a choice: "configmap or secret",
// each followed by suffix ("/NAME").
func SourceNames(suffix string) string {
	var b strings.Builder
	for i, k := range sourceKinds {
		switch {
		case i == len(sourceKinds)-1 && i > 0:
			b.WriteString(" or ")
		case i > 0:
			b.WriteString(", ")
		}
		b.WriteString(k.Name + suffix)
	}
	return b.String()
}
