package stamp

import (
	"cmp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Options say which sources count: a field for each source kind with a Flag, read by
// its SourceKind.Counts.
type Options struct {
	// Secrets: Secrets count as sources (secret volumes, projected secrets,
	// envFrom.secretRef, secretKeyRef, secret/ entries of extra-sources). Off, they are
	// left out as if not referenced.
	Secrets bool
	// CSISecrets: SecretProviderClasses that csi volumes of the Secrets Store CSI driver
	// mount count as sources (their digest is over the object versions the driver
	// records). Off, nothing of the driver's is read.
	CSISecrets bool
	// MaxSources is the most sources one workload may consume and still be stamped
	// (0: DefaultMaxSources); see SourceCap.
	MaxSources int
}

// DefaultMaxSources is the default cap on the sources of one workload: far above what
// pod templates consume (a handful; the API server lets a template reference thousands),
// and low enough that one admission's reads stay few.
const DefaultMaxSources = 256

// SourceCap is the most sources one workload may consume and still be stamped: past
// it, the webhook reads nothing and leaves the stamp as stored, and the watcher reports
// it (decide.Gate).
func (o Options) SourceCap() int {
	if o.MaxSources > 0 {
		return o.MaxSources
	}
	return DefaultMaxSources
}

// OverCap reports whether srcs are more than o lets one workload consume.
func (o Options) OverCap(srcs []Source) bool { return len(srcs) > o.SourceCap() }

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

// References returns the ConfigMaps a pod spec consumes (Secrets are left out), sorted
// by name, with the keys of each that the pod can see: Consumed without extra sources
// and with default Options.
func References(spec *corev1.PodSpec) []Source {
	return Consumed(nil, spec, Options{})
}

// Consumed returns the sources a workload consumes, sorted by (kind, name), with the keys
// of each that the pod can see: those its pod spec references, and those its
// extra-sources annotation (in annotations, the workload's own) names. A source
// referenced several ways gets the union of the keys; any reference that sees all keys
// makes it all keys. Malformed extra-sources entries are left out (ExtraSources says
// which).
func Consumed(annotations map[string]string, spec *corev1.PodSpec, opts Options) []Source {
	c := collector{opts: opts, m: map[string]*Source{}}
	if spec != nil {
		c.addPodSpec(spec)
	}
	if v, ok := annotations[ExtraSourcesAnnotation]; ok {
		refs, _ := ExtraSources(v, opts)
		for _, r := range refs {
			// Whatever consumes it (a sidecar injected at pod creation, the API) may
			// read it all, files included; it is not required.
			s := c.source(SourceKindNamed(r.Kind), r.Name, new(true))
			s.AllKeys, s.Binary = true, true
		}
	}
	return c.sources()
}

// addPodSpec adds what each source kind's references in spec select.
func (c collector) addPodSpec(spec *corev1.PodSpec) {
	for _, k := range sourceKinds {
		for i := range spec.Volumes {
			v := &spec.Volumes[i]
			if k.volume != nil {
				if r, ok := k.volume(v); ok {
					c.addVolume(k, r)
				}
			}
			if v.Projected != nil && k.projected != nil {
				for j := range v.Projected.Sources {
					if r, ok := k.projected(&v.Projected.Sources[j]); ok {
						c.addVolume(k, r)
					}
				}
			}
		}
		for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
			for i := range list {
				c.addContainer(k, &list[i])
			}
		}
	}
}

type collector struct {
	opts Options
	m    map[string]*Source // by kind + "/" + name
}

// source returns the entry of one source, nil when its kind does not count.
func (c collector) source(kind *SourceKind, name string, optional *bool) *Source {
	if !kind.Counts(c.opts) {
		return nil
	}
	id := kind.Name + "/" + name
	s, ok := c.m[id]
	if !ok {
		s = &Source{Kind: kind.Name, Name: name}
		c.m[id] = s
	}
	if !isOptional(optional) {
		s.Required = true
	}
	return s
}

func isOptional(o *bool) bool { return o != nil && *o }

func (c collector) addVolume(kind *SourceKind, r podRef) {
	if r.name == "" {
		return
	}
	s := c.source(kind, r.name, r.optional)
	if s == nil {
		return
	}
	s.Binary = true
	if len(r.items) == 0 {
		s.AllKeys = true
		return
	}
	for _, it := range r.items {
		s.Keys = append(s.Keys, it.Key)
		if !isOptional(r.optional) {
			s.RequiredKeys = append(s.RequiredKeys, it.Key)
		}
	}
}

// addContainer adds the sources of one kind a container's envFrom and env select.
func (c collector) addContainer(kind *SourceKind, ct *corev1.Container) {
	for i := range ct.EnvFrom {
		if kind.envFrom == nil {
			break
		}
		if r, ok := kind.envFrom(&ct.EnvFrom[i]); ok && r.name != "" {
			if s := c.source(kind, r.name, r.optional); s != nil {
				s.AllKeys = true
			}
		}
	}
	for i := range ct.Env {
		if kind.keyRef == nil {
			break
		}
		if vf := ct.Env[i].ValueFrom; vf != nil {
			if r, ok := kind.keyRef(vf); ok {
				c.addKey(kind, r)
			}
		}
	}
}

// addKey adds one key an env variable selects.
func (c collector) addKey(kind *SourceKind, r podRef) {
	if r.name == "" {
		return
	}
	s := c.source(kind, r.name, r.optional)
	if s == nil {
		return
	}
	s.Keys = append(s.Keys, r.key)
	if !isOptional(r.optional) {
		s.RequiredKeys = append(s.RequiredKeys, r.key)
		s.RequiredEnvKeys = append(s.RequiredEnvKeys, r.key)
	}
}

func (c collector) sources() []Source {
	if len(c.m) == 0 {
		return nil
	}
	out := make([]Source, 0, len(c.m))
	for _, s := range c.m {
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

// ID is the source's "kind/name", as the sources annotation and extra-sources write it.
func (s Source) ID() string { return s.Kind + "/" + s.Name }

// Unmet says what the pods would lack to start if cm (nil: missing) were the source's
// content (a Secret as SecretContent gives it): the source itself, or a selected key, that a non-optional reference needs.
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

// ReferencesOnly returns the least pod spec that Consumed reads as it reads spec,
// whatever the Options: the volumes that mount a source, with only their source; and one
// container holding every distinct envFrom entry that names a source and every distinct
// env selection of a source's key, unnamed, from all init and app containers (Consumed
// takes them alike). The references are shared with spec, not copied.
func ReferencesOnly(spec *corev1.PodSpec) corev1.PodSpec {
	var out corev1.PodSpec
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		if kept, ok := sourceVolume(v); ok {
			out.Volumes = append(out.Volumes, kept)
		}
	}
	var refs corev1.Container
	seen := entriesSeen{envFrom: map[string]struct{}{}, env: map[string]struct{}{}}
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			addContainerRefs(&refs, seen, &list[i])
		}
	}
	if len(refs.Env) > 0 || len(refs.EnvFrom) > 0 {
		out.Containers = []corev1.Container{refs}
	}
	return out
}

// sourceVolume is v with only its source, when it mounts one of any kind, itself or
// projected.
func sourceVolume(v *corev1.Volume) (corev1.Volume, bool) {
	var out corev1.Volume
	for _, k := range sourceKinds {
		if k.volume != nil && refFound(k.volume(v)) {
			out.ConfigMap, out.Secret, out.CSI = v.ConfigMap, v.Secret, v.CSI
		}
		if v.Projected != nil && k.projected != nil && slices.ContainsFunc(v.Projected.Sources, func(p corev1.VolumeProjection) bool { return refFound(k.projected(&p)) }) {
			out.Projected = v.Projected
		}
	}
	return out, out.ConfigMap != nil || out.Secret != nil || out.CSI != nil || out.Projected != nil
}

// entriesSeen holds the encodings of the envFrom entries and env selections kept: a
// template may hold thousands (one tenant's), and the cache's transform runs this on
// every event of every workload, so each entry is looked up, not compared with each kept.
type entriesSeen struct{ envFrom, env map[string]struct{} }

// addContainerRefs adds to refs the env and envFrom entries of ct that reference a
// source of any kind, each distinct selection once.
func addContainerRefs(refs *corev1.Container, seen entriesSeen, ct *corev1.Container) {
	for _, e := range ct.EnvFrom {
		if slices.ContainsFunc(sourceKinds, func(k *SourceKind) bool { return k.envFrom != nil && refFound(k.envFrom(&e)) }) && firstSeen(seen.envFrom, &e) {
			refs.EnvFrom = append(refs.EnvFrom, e)
		}
	}
	for _, e := range ct.Env {
		if e.ValueFrom == nil || !slices.ContainsFunc(sourceKinds, func(k *SourceKind) bool { return k.keyRef != nil && refFound(k.keyRef(e.ValueFrom)) }) {
			continue
		}
		if firstSeen(seen.env, e.ValueFrom) {
			refs.Env = append(refs.Env, corev1.EnvVar{ValueFrom: e.ValueFrom})
		}
	}
}

// firstSeen reports whether entry's encoding is not in seen yet, and adds it. Equal
// encodings are equal entries (the protobuf encoding tells a nil optional from false);
// one that does not encode is kept.
func firstSeen(seen map[string]struct{}, entry interface{ Marshal() ([]byte, error) }) bool {
	b, err := entry.Marshal()
	if err != nil {
		return true
	}
	if _, ok := seen[string(b)]; ok {
		return false
	}
	seen[string(b)] = struct{}{}
	return true
}

// refFound is the second result of a reference function.
func refFound(_ podRef, found bool) bool { return found }
