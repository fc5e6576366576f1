package stamp

import apivalidation "k8s.io/apimachinery/pkg/api/validation"

// AnnotationSizeLimit is the API server's limit on the annotations of one object's
// metadata (and, separately, of a built-in workload's pod template): keys and values
// together, in bytes.
const AnnotationSizeLimit = apivalidation.TotalAnnotationSizeLimitB

// AnnotationsFit reports whether annotations, with each key of set given its value (an
// empty value: the key removed), stay within AnnotationSizeLimit, counted as the API
// server counts them.
func AnnotationsFit(annotations, set map[string]string) bool {
	size := 0
	for k, v := range annotations {
		if _, ok := set[k]; !ok {
			size += len(k) + len(v)
		}
	}
	for k, v := range set {
		if v != "" {
			size += len(k) + len(v)
		}
	}
	return size <= AnnotationSizeLimit
}

// TemplateAnnotations are the pod-template annotations of a stamp: its hash and
// per-source digests (none when hash is empty), and the restart time when one is set.
func TemplateAnnotations(hash, sources, restartedAt string) map[string]string {
	if hash == "" {
		sources = ""
	}
	set := map[string]string{HashAnnotation: hash, SourcesAnnotation: sources}
	if restartedAt != "" {
		set[RestartedAnnotation] = restartedAt
	}
	return set
}

// NeedsRestart reports whether rolling a workload to want takes a restart annotation:
// its template already carries want's stamp, but its certain record says its pods run
// other config, so only a new template rolls them.
func NeedsRestart(stored, want string, certain bool, recorded string) bool {
	return certain && want != "" && want == stored && want != recorded
}
