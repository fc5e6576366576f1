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
	return AnnotationsFitWithin(annotations, set, 0)
}

// CauseHeadroom is the room a change cause must leave under AnnotationSizeLimit for the
// webhook to write it. The controllers copy a workload's annotations onto the revision
// of a rollout: the Deployment controller onto the ReplicaSet (all but kubectl's
// last-applied-configuration, and again on every sync of the current one), adding its
// own deployment.kubernetes.io/revision, desired-replicas, max-replicas and
// revision-history (up to about 2 KB); the StatefulSet and DaemonSet controllers onto a
// ControllerRevision. A cause that took a workload up to the limit could leave the
// revision no room: the controller's write is refused and the rollout stalls. The cause
// is optional (the stamp and the record are not), so only it keeps this headroom.
const CauseHeadroom = 4 << 10

// AnnotationsFitWithin reports whether annotations, with set applied as AnnotationsFit
// applies it, stay at least room bytes under AnnotationSizeLimit.
func AnnotationsFitWithin(annotations, set map[string]string, room int) bool {
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
	return size <= AnnotationSizeLimit-room
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
