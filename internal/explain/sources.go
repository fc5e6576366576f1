package explain

import (
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// ids lists the sources with one of the statuses; with "" alone, those written since
// the workload's last write with an unchanged digest.
func (r *Report) ids(statuses ...string) []string {
	var out []string
	for _, s := range r.Sources {
		if statuses[0] == "" {
			if s.WrittenSince && s.Status == StatusUnchanged {
				out = append(out, s.ID())
			}
			continue
		}
		if slices.Contains(statuses, s.Status) {
			out = append(out, s.ID())
		}
	}
	return out
}

// sources compares each source's stamped digest with its digest now.
func sources(in Input, tmpl *corev1.PodTemplateSpec, refs []stamp.Source) []Source {
	obj := in.Object
	stamped := stamp.ParseSources(tmpl.Annotations[stamp.SourcesAnnotation])
	hasStamp := tmpl.Annotations[stamp.HashAnnotation] != ""
	current := map[string]stamp.Digest{}
	for _, d := range in.Live.Stamp.Sources {
		current[d.Kind+"/"+d.Name] = d
	}
	how := via(obj.GetAnnotations(), &tmpl.Spec, in.Options)
	// "Written since" is since its pods began to be created when that is known, else
	// since the workload's last write.
	since := workload.LastWrite(obj)
	if t := in.Times; t != nil && t.PodsKnown && t.PodsErr == "" {
		since = t.PodsSince
	}
	out := make([]Source, 0, len(refs))
	seen := map[string]bool{}
	for _, ref := range refs {
		id := ref.ID()
		seen[id] = true
		s := Source{Kind: ref.Kind, Name: ref.Name, Use: use(ref, how), Stamped: stamped[id]}
		cm, read := in.Live.Content[id]
		d, digested := current[id]
		switch {
		case read && stamp.Ignored(cm):
			s.Status = StatusIgnored
		case !digested && read && cm == nil && s.Stamped != "" && s.Stamped != "missing" && hasStamp:
			// A Secret, not digested, deleted since the stamp: changed without a key.
			s.Status, s.Current, s.Missing, s.Unmet = StatusChanged, "missing", true, ref.Unmet(nil)
		case !digested:
			s.Status = StatusUnknown
		default:
			s.Current, s.Missing, s.Unmet = digestString(d), d.Missing, d.Unmet
			switch {
			case !hasStamp:
				s.Status = StatusNotStamped
			case s.Stamped == "":
				s.Status = StatusAdded
			case s.Stamped == s.Current:
				s.Status = StatusUnchanged
			default:
				s.Status = StatusChanged
			}
		}
		if cm != nil {
			s.Unconsumed = unconsumed(ref, cm)
			s.WrittenSince = workload.LastWrite(cm).After(since)
		}
		s.Note = note(s)
		if in.Live.NotRead && s.Status == StatusUnknown {
			s.Note = "not read: configstamp leaves the workload alone"
		}
		out = append(out, s)
	}
	for _, id := range slices.Sorted(maps.Keys(stamped)) {
		if seen[id] {
			continue
		}
		kind, name, _ := strings.Cut(id, "/")
		s := Source{Kind: kind, Name: name, Stamped: stamped[id], Status: StatusRemoved, Use: Use{Via: []string{}}}
		s.Note = note(s)
		out = append(out, s)
	}
	return out
}

// note says in words what a source's status means for a rollout.
func note(s Source) string {
	switch s.Status {
	case StatusChanged:
		if s.Missing {
			return s.ID() + " was deleted since the last rollout"
		}
		return s.ID() + " changed since the last rollout"
	case StatusAdded:
		return "not in the stamp: consumed since it was made, or counted since (Secrets turned on)"
	case StatusRemoved:
		return "no longer consumed"
	case StatusIgnored:
		return "annotated " + stamp.IgnoreAnnotation + "=true: not hashed"
	case StatusUnknown:
		return "digest not compared: no readable hash key, and the webhook's dry-run failed"
	}
	var parts []string
	if s.Unmet != "" {
		parts = append(parts, s.Unmet)
	} else if s.Missing {
		parts = append(parts, "missing (optional)")
	}
	if s.WrittenSince && s.Status == StatusUnchanged {
		parts = append(parts, "changed since its pods started, but not in a key they see")
	}
	if len(s.Unconsumed) > 0 {
		parts = append(parts, "key "+strings.Join(s.Unconsumed, ", ")+": pods do not see it, changes roll nothing")
	}
	return strings.Join(parts, "; ")
}

// unconsumed lists the keys of cm the pods of ref do not see.
func unconsumed(ref stamp.Source, cm *corev1.ConfigMap) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(cm.Data)) {
		if !ref.AllKeys && !slices.Contains(ref.Keys, k) {
			out = append(out, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(cm.BinaryData)) {
		if _, dup := cm.Data[k]; dup {
			continue
		}
		if !ref.Binary || (!ref.AllKeys && !slices.Contains(ref.Keys, k)) {
			out = append(out, k)
		}
	}
	return out
}

// digestString is a digest as the sources annotation writes it.
func digestString(d stamp.Digest) string {
	one := stamp.Combine([]stamp.Digest{d}).SourcesAnnotation()
	_, v, _ := strings.Cut(one, "=")
	return v
}

// prefix is the first 12 characters of a hash, as Events and the sources annotation
// show them.
func prefix(h string) string { return h[:min(len(h), 12)] }
