package stamp

import (
	"cmp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// KindConfigMap is the only source kind today; it is part of the hash encoding so that
// Secrets can be added later without two kinds ever sharing an encoding.
const KindConfigMap = "configmap"

// Source is one object a pod template consumes and the keys of it the pod can see.
type Source struct {
	Kind string
	Name string
	// AllKeys is true when the pod sees every key (a volume without items, envFrom).
	AllKeys bool
	// Keys are the keys the pod sees when AllKeys is false, sorted and unique.
	Keys []string
	// Binary is true when a volume mounts the source. Only files can carry binaryData:
	// env and envFrom never see it, so for a source consumed through env alone,
	// binaryData is not hashed. (A key selected by env whose value lives in binaryData
	// of a source that a volume also mounts is hashed as the volume sees it.)
	Binary bool
	// Required is true when some reference is not optional: the pods cannot start
	// while the source is missing.
	Required bool
	// RequiredKeys are the selected keys a non-optional reference needs, sorted and
	// unique: the pods cannot start while one is missing.
	RequiredKeys []string
	// RequiredEnvKeys are those of RequiredKeys a non-optional env reference needs: env
	// reads data only, so for these a key in binaryData is missing.
	RequiredEnvKeys []string
}

// References returns the ConfigMaps a pod spec consumes, sorted by (kind, name), with the
// keys of each that the pod can see. A ConfigMap referenced several ways gets the union
// of the keys; any reference that sees all keys makes it all keys.
func References(spec *corev1.PodSpec) []Source {
	if spec == nil {
		return nil
	}
	c := collector{}
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		if v.ConfigMap != nil {
			c.addVolume(v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional)
		}
		if v.Projected != nil {
			for j := range v.Projected.Sources {
				if cm := v.Projected.Sources[j].ConfigMap; cm != nil {
					c.addVolume(cm.Name, cm.Items, cm.Optional)
				}
			}
		}
	}
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			c.addContainer(&list[i])
		}
	}
	return c.sources()
}

type collector map[string]*Source

func (c collector) source(name string, optional *bool) *Source {
	s, ok := c[name]
	if !ok {
		s = &Source{Kind: KindConfigMap, Name: name}
		c[name] = s
	}
	if !isOptional(optional) {
		s.Required = true
	}
	return s
}

func isOptional(o *bool) bool { return o != nil && *o }

func (c collector) addVolume(name string, items []corev1.KeyToPath, optional *bool) {
	if name == "" {
		return
	}
	s := c.source(name, optional)
	s.Binary = true
	if len(items) == 0 {
		s.AllKeys = true
		return
	}
	for _, it := range items {
		s.Keys = append(s.Keys, it.Key)
		if !isOptional(optional) {
			s.RequiredKeys = append(s.RequiredKeys, it.Key)
		}
	}
}

func (c collector) addContainer(ct *corev1.Container) {
	for _, ef := range ct.EnvFrom {
		if ef.ConfigMapRef != nil && ef.ConfigMapRef.Name != "" {
			c.source(ef.ConfigMapRef.Name, ef.ConfigMapRef.Optional).AllKeys = true
		}
	}
	for _, e := range ct.Env {
		if e.ValueFrom == nil || e.ValueFrom.ConfigMapKeyRef == nil || e.ValueFrom.ConfigMapKeyRef.Name == "" {
			continue
		}
		ref := e.ValueFrom.ConfigMapKeyRef
		s := c.source(ref.Name, ref.Optional)
		s.Keys = append(s.Keys, ref.Key)
		if !isOptional(ref.Optional) {
			s.RequiredKeys = append(s.RequiredKeys, ref.Key)
			s.RequiredEnvKeys = append(s.RequiredEnvKeys, ref.Key)
		}
	}
}

func (c collector) sources() []Source {
	if len(c) == 0 {
		return nil
	}
	out := make([]Source, 0, len(c))
	for _, s := range c {
		if s.AllKeys {
			s.Keys = nil
		} else {
			s.Keys = sortedUnique(s.Keys)
		}
		s.RequiredKeys = sortedUnique(s.RequiredKeys)
		s.RequiredEnvKeys = sortedUnique(s.RequiredEnvKeys)
		out = append(out, *s)
	}
	slices.SortFunc(out, compareSources)
	return out
}

func sortedUnique(keys []string) []string {
	slices.Sort(keys)
	return slices.Compact(keys)
}

func compareSources(a, b Source) int {
	return cmp.Or(strings.Compare(a.Kind, b.Kind), strings.Compare(a.Name, b.Name))
}

// Names returns the names of the sources, in order; the watcher indexes them.
func Names(sources []Source) []string {
	out := make([]string, len(sources))
	for i, s := range sources {
		out[i] = s.Name
	}
	return out
}

// Unmet says what the pods would lack to start if cm (nil: missing) were the source's
// content: the source itself, or a selected key, that a non-optional reference needs.
// Empty when nothing required is missing.
func (s Source) Unmet(cm *corev1.ConfigMap) string {
	if cm == nil {
		if s.Required {
			return s.Kind + "/" + s.Name + " is missing"
		}
		return ""
	}
	var missing []string
	for _, k := range s.RequiredKeys {
		if !s.present(cm, k) {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return s.Kind + "/" + s.Name + " lacks key " + strings.Join(missing, ", ")
}

// present reports whether required key k of cm is there for every non-optional
// reference to it: env references read data only; volumes read binaryData too.
func (s Source) present(cm *corev1.ConfigMap, k string) bool {
	if _, ok := cm.Data[k]; ok {
		return true
	}
	_, ok := cm.BinaryData[k]
	return ok && s.Binary && !slices.Contains(s.RequiredEnvKeys, k)
}
