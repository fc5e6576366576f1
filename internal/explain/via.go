package explain

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/configstamp/configstamp/stamp"
)

// How a pod template consumes a source, as Source.Via lists it.
const (
	ViaVolume       = "volume"
	ViaProjected    = "projected"
	ViaEnvFrom      = "envFrom"
	ViaKeyRef       = "keyRef"
	ViaExtraSources = "extra-sources"
)

// via says, by source ID, how a workload consumes each of its sources. It asks
// stamp.Consumed about one part of the pod spec at a time, so that what counts as a
// reference is decided in one place only.
func via(annotations map[string]string, spec *corev1.PodSpec, opts stamp.Options) map[string][]string {
	parts := []struct {
		name string
		ann  map[string]string
		spec corev1.PodSpec
	}{
		{name: ViaVolume, spec: corev1.PodSpec{Volumes: volumes(spec, false)}},
		{name: ViaProjected, spec: corev1.PodSpec{Volumes: volumes(spec, true)}},
		{name: ViaEnvFrom, spec: corev1.PodSpec{Containers: containers(spec, true)}},
		{name: ViaKeyRef, spec: corev1.PodSpec{Containers: containers(spec, false)}},
		{name: ViaExtraSources, ann: map[string]string{stamp.ExtraSourcesAnnotation: annotations[stamp.ExtraSourcesAnnotation]}},
	}
	out := map[string][]string{}
	for _, p := range parts {
		if p.ann == nil && len(p.spec.Volumes) == 0 && len(p.spec.Containers) == 0 {
			continue
		}
		for _, s := range stamp.Consumed(p.ann, &p.spec, opts) {
			out[s.ID()] = append(out[s.ID()], p.name)
		}
	}
	return out
}

// volumes returns the projected volumes of spec, or the others.
func volumes(spec *corev1.PodSpec, projected bool) []corev1.Volume {
	var out []corev1.Volume
	for _, v := range spec.Volumes {
		if (v.Projected != nil) == projected {
			out = append(out, v)
		}
	}
	return out
}

// containers returns the containers and init containers of spec with only their
// envFrom, or only their env.
func containers(spec *corev1.PodSpec, envFrom bool) []corev1.Container {
	var out []corev1.Container
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range list {
			if envFrom {
				out = append(out, corev1.Container{EnvFrom: c.EnvFrom})
			} else {
				out = append(out, corev1.Container{Env: c.Env})
			}
		}
	}
	return out
}
