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
			c.addItems(v.ConfigMap.Name, v.ConfigMap.Items)
		}
		if v.Projected != nil {
			for j := range v.Projected.Sources {
				if cm := v.Projected.Sources[j].ConfigMap; cm != nil {
					c.addItems(cm.Name, cm.Items)
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

func (c collector) source(name string) *Source {
	s, ok := c[name]
	if !ok {
		s = &Source{Kind: KindConfigMap, Name: name}
		c[name] = s
	}
	return s
}

func (c collector) addItems(name string, items []corev1.KeyToPath) {
	if name == "" {
		return
	}
	s := c.source(name)
	if len(items) == 0 {
		s.AllKeys = true
		return
	}
	for _, it := range items {
		s.Keys = append(s.Keys, it.Key)
	}
}

func (c collector) addContainer(ct *corev1.Container) {
	for _, ef := range ct.EnvFrom {
		if ef.ConfigMapRef != nil && ef.ConfigMapRef.Name != "" {
			c.source(ef.ConfigMapRef.Name).AllKeys = true
		}
	}
	for _, e := range ct.Env {
		if e.ValueFrom == nil || e.ValueFrom.ConfigMapKeyRef == nil || e.ValueFrom.ConfigMapKeyRef.Name == "" {
			continue
		}
		ref := e.ValueFrom.ConfigMapKeyRef
		s := c.source(ref.Name)
		s.Keys = append(s.Keys, ref.Key)
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
			slices.Sort(s.Keys)
			s.Keys = slices.Compact(s.Keys)
		}
		out = append(out, *s)
	}
	slices.SortFunc(out, compareSources)
	return out
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
