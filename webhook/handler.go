// Package webhook is configstamp's mutating admission webhook: it stamps the hash of the
// config a workload's pods consume into their template, so a config change rolls them.
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"time"
	"unicode"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// Path is where the API server sends Deployment admission reviews.
var Path = workload.Deployment.Path()

// Audit annotation keys; the API server prefixes them with the webhook entry's name.
const (
	AuditHash    = "config-hash"
	AuditSources = "sources"
)

var errNoRequest = errors.New("admission review without a request (no uid)")

// DefaultReadTimeout bounds the live reads of one admission, well inside the
// registration's timeoutSeconds, so a slow API server never blocks a deploy.
const DefaultReadTimeout = 3 * time.Second

// Stamper is the admission handler. It is a raw admission.Handler rather than a
// CustomDefaulter because it has to set auditAnnotations and warnings.
type Stamper struct {
	// Kinds are the workload kinds it stamps (default: workload.Builtin()).
	Kinds []*workload.Kind
	// Sources says which sources count (Secrets or not).
	Sources stamp.Options
	// Reader reads sources live (manager.GetAPIReader()), never from a cache.
	Reader client.Reader
	// ReadTimeout bounds the reads of one admission.
	ReadTimeout time.Duration
	// Cache, when set, lets an unchanged source be checked with a metadata-only read.
	Cache *configread.DigestCache
	// Key returns the HMAC key of Secret digests (required when Sources.Secrets).
	Key func() []byte
	// Self is the user configstamp's watcher runs as: only its requests may nudge or
	// write a record. Empty: anyone's marker counts.
	Self string
}

var _ admission.Handler = &Stamper{}

// Handle stamps CREATE and UPDATE of the workloads of its kinds. Whatever goes wrong short
// of an undecodable object, it admits the request: it never blocks a deploy.
func (s *Stamper) Handle(ctx context.Context, req admission.Request) (resp admission.Response) {
	start := time.Now()
	if handled, ok := ctx.Value(handledKey{}).(*bool); ok {
		*handled = true
	}
	defer func() {
		if r := recover(); r != nil {
			// A bug. Admit the request as it came: an answer of allowed=false (what
			// controller-runtime's own recovery sends) would refuse the write whatever
			// the failurePolicy, blocking a deploy.
			logf.FromContext(ctx).Error(fmt.Errorf("panic: %v", r), "Admitted unstamped: the handler panicked",
				"namespace", req.Namespace, "name", req.Name, "stack", string(debug.Stack()))
			observe(resultPanic, start)
			resp = admission.Allowed("").WithWarnings("configstamp: not stamped: internal error (a bug; see configstamp's log)")
		}
	}()
	resp, result := s.handle(ctx, req)
	observe(result, start)
	return resp
}

func (s *Stamper) handle(ctx context.Context, req admission.Request) (admission.Response, string) {
	log := logf.FromContext(ctx)
	if req.UID == "" {
		log.Error(errNoRequest, "Rejected malformed admission review")
		return admission.Errored(http.StatusBadRequest, errNoRequest), resultRejected
	}
	kind := workload.Find(s.kinds(), req.Kind.Group, req.Kind.Kind)
	if kind == nil {
		return admission.Allowed(fmt.Sprintf("configstamp does not stamp %s.%s", req.Kind.Kind, req.Kind.Group)), resultSkipped
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed(""), resultSkipped
	}
	log = log.WithValues("kind", kind.Kind)
	obj, err := decode(kind, req.Object.Raw)
	if err != nil {
		log.Error(err, "Rejected undecodable object", "namespace", req.Namespace, "name", req.Name)
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode object: %w", err)), resultRejected
	}
	tmpl := kind.Template(obj)
	var old client.Object
	var oldTmpl *corev1.PodTemplateSpec
	if req.Operation == admissionv1.Update {
		if old, err = decode(kind, req.OldObject.Raw); err != nil {
			log.Error(err, "Rejected undecodable old object", "namespace", req.Namespace, "name", req.Name)
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode oldObject: %w", err)), resultRejected
		}
		oldTmpl = kind.Template(old)
	}

	var patches []jsonpatch.JsonPatchOperation
	annotations := obj.GetAnnotations()
	marker := stamp.ParseMarker(annotations)
	marked := marker.Present
	if marked {
		patches = append(patches, jsonpatch.NewOperation("remove", "/metadata/annotations/"+escape(stamp.NudgeAnnotation), nil))
	}
	// Only configstamp's own marker counts: a leftover one (the webhook was down when it
	// was set), one copied back from a ReplicaSet by rollout undo, or one set by hand is
	// stripped and ignored.
	ours := marked && (s.Self == "" || req.UserInfo.Username == s.Self)
	recording := ours && marker.Record // the watcher writes a record
	nudged := ours && marker.Nudge
	if problem := kind.Problem(obj); problem != "" {
		log.Info("Left alone: its pod template does not decode", "namespace", req.Namespace, "name", req.Name, "error", problem)
		return respond(patches, "configstamp: not stamped: its pod template does not decode as a pod template: "+problem), resultSkipped
	}
	if tmpl == nil || stamp.IsTrue(annotations[stamp.SkipAnnotation]) {
		// Skipped, or no pod template of its own (a Rollout that refers to a
		// Deployment's).
		return respond(patches), resultSkipped
	}
	namespace := obj.GetNamespace()
	if namespace == "" {
		namespace = req.Namespace
	}
	name := obj.GetName()
	var warnings []string
	if v, ok := annotations[stamp.ExtraSourcesAnnotation]; ok {
		if _, problems := stamp.ExtraSources(v, s.Sources); len(problems) > 0 {
			warnings = append(warnings, "configstamp: ignored entries of "+stamp.ExtraSourcesAnnotation+": "+strings.Join(problems, "; "))
		}
	}
	// The stamp and the record the workload carries are configstamp's: an UPDATE that
	// drops or changes them (kubectl replace, helm upgrade --force, rollout undo copying
	// a ReplicaSet's annotations) does not change what they say. A change of the pod
	// template, or of the extra sources, is a change of what the pods consume.
	stored := &tmpl.ObjectMeta
	templateChanged := true
	var record map[string]string
	if old != nil && oldTmpl != nil {
		stored = &oldTmpl.ObjectMeta
		templateChanged = !stamp.SameTemplate(oldTmpl, tmpl) ||
			old.GetAnnotations()[stamp.ExtraSourcesAnnotation] != annotations[stamp.ExtraSourcesAnnotation]
		record = old.GetAnnotations()
	}
	if recording {
		record = annotations
	}
	storedHash := stored.Annotations[stamp.HashAnnotation]
	srcs := stamp.Consumed(annotations, &tmpl.Spec, s.Sources)
	// A record for this template keeps someone else's update from changing the stamp;
	// it is the basis only when made while Secrets counted as they do now.
	rec, recValid := stamp.ObservedFor(record, tmpl)
	certain := recValid && rec.Certain(srcs)
	basis := storedHash
	if certain {
		basis = rec.Hash
	}
	keep := func() []jsonpatch.JsonPatchOperation {
		ops := restoreStamp(stored, &tmpl.ObjectMeta)
		keepRecord := record[stamp.ObservedAnnotation]
		if !stamp.AnnotationsFit(annotations, map[string]string{stamp.ObservedAnnotation: keepRecord, stamp.NudgeAnnotation: ""}) {
			// The update filled the metadata's annotations: a record put back would make
			// the API server refuse it. Without one, the watcher judges from the stamp.
			log.Info("Left the record out: it would exceed the annotation size limit", "namespace", req.Namespace, "name", req.Name,
				"limit", stamp.AnnotationSizeLimit)
			keepRecord = ""
		}
		return append(ops, annotationPatch(annotations, stamp.ObservedAnnotation, keepRecord)...)
	}
	// unread answers an update whose config could not be read: what is stored, and a
	// warning saying so (the watcher tells an unread nudge by it).
	unread := func(err error) (admission.Response, string) {
		log.Error(err, "Admitted with the stored config hash: could not read config", "namespace", namespace, "name", name, "storedHash", storedHash)
		return respond(append(patches, keep()...), append(warnings, stamp.UnreadWarning(kind.Kind, storedHash, err))...), resultReadError
	}

	// A stamp without a record because none fits (see below) is treated as recorded:
	// someone else's update must not roll it past the debounce and the watcher's pace.
	noRoom := !recValid && storedHash != "" && !stamp.AnnotationsFit(annotations, map[string]string{
		stamp.ObservedAnnotation: stamp.Observed{Hash: storedHash, Template: stamp.TemplateFingerprint(tmpl), Secrets: stamp.HasSecrets(srcs)}.String(),
		stamp.NudgeAnnotation:    ""})
	if !templateChanged && !nudged && (recValid || storedHash == "" || noRoom) {
		// Someone else's update that leaves the pod template as it is. A workload with a
		// record is the watcher's to roll (after the debounce); an unstamped one without
		// a record is left alone: installing configstamp rolls nothing. What it carries
		// of configstamp's stays as stored, unless it is what configstamp writes now
		// (this is a reinvocation after configstamp's own patch).
		current, err := s.current(ctx, namespace, annotations, tmpl, srcs, storedHash, record[stamp.ObservedAnnotation])
		if current {
			return respond(patches, warnings...), resultSkipped
		}
		if err != nil {
			// A reinvocation after configstamp's own patch (another webhook changed the
			// object since) that cannot read config: what it stamped is put back as
			// stored, and said so, as below.
			return unread(err)
		}
		return respond(append(patches, keep()...), warnings...), resultSkipped
	}

	if cause := annotations[stamp.ChangeCauseAnnotation]; templateChanged && !nudged && stamp.IsOwnChangeCause(cause) &&
		(old == nil || old.GetAnnotations()[stamp.ChangeCauseAnnotation] == cause) {
		// Someone else's rollout carrying configstamp's cause of an earlier one (the
		// workload kept its annotations): without it, `kubectl rollout history` shows no
		// cause for this revision rather than a wrong one.
		patches = append(patches, annotationPatch(annotations, stamp.ChangeCauseAnnotation, "")...)
		delete(annotations, stamp.ChangeCauseAnnotation) // for the size checks below
	}

	want, err := s.reader().Stamp(ctx, namespace, srcs)
	if err != nil {
		return unread(err)
	}
	unmet := want.Unmet()
	if len(unmet) > 0 && !templateChanged && want.Hash != basis {
		// A nudge, or someone's update that keeps the template: rolling now would start
		// pods that cannot start. Keep what is stored; the watcher reports it.
		log.Info("Kept the stored config hash: required config is missing", "namespace", namespace, "name", name,
			"operation", string(req.Operation), "user", req.UserInfo.Username, "storedHash", storedHash, "missing", unmet)
		return respond(append(patches, keep()...), append(warnings, "configstamp: kept the stored config hash, not rolling into missing config: "+strings.Join(unmet, "; "))...), resultHeld
	}

	if nudged && !templateChanged && certain && want.Hash == rec.Hash && want.Hash != storedHash {
		// A nudge that finds the config as its pods run it (their record says so) while
		// the stamp names other config: it changed back between the watcher's check and
		// this nudge. A new stamp would roll pods onto the config they already run; keep
		// what is stored (the record stays the basis: a later change to the stamp's
		// config restarts them, NeedsRestart).
		log.Info("Kept the stored config hash: the pods run the config as it is now (their record)", "namespace", namespace, "name", name,
			"storedHash", storedHash, "recordHash", rec.Hash)
		return respond(append(patches, keep()...), warnings...), resultUnchanged
	}

	restartedAt := ""
	if nudged && !templateChanged && stamp.NeedsRestart(storedHash, want.Hash, certain, rec.Hash) {
		// The template already carries the wanted stamp, but its pods run other config
		// (its record): only a new template rolls them.
		restartedAt = time.Now().UTC().Format(time.RFC3339)
	}
	tmplSet := stamp.TemplateAnnotations(want.Hash, want.SourcesAnnotation(), restartedAt)
	if !stamp.AnnotationsFit(tmpl.Annotations, tmplSet) {
		// The API server would refuse the template with the stamp in it (for a custom
		// resource, the ReplicaSets and pods made from it): admit the request without
		// one (the watcher does not nudge it either; it reports it).
		log.Info("Left unstamped: the stamp would exceed the pod template's annotation size limit", "namespace", namespace, "name", name,
			"operation", string(req.Operation), "user", req.UserInfo.Username, "limit", stamp.AnnotationSizeLimit)
		warnings = append(warnings, fmt.Sprintf("configstamp: not stamped: its stamp would take the %s's pod template annotations past the API server's limit of %d bytes; it will not roll on config changes until they are smaller",
			kind.Kind, stamp.AnnotationSizeLimit))
		if templateChanged {
			// A new or changed template: a stamp or record it carries describes other
			// config than its new pods will run; drop them (removing only shrinks).
			patches = append(patches, templatePatch(&tmpl.ObjectMeta, unstamped)...)
			patches = append(patches, annotationPatch(annotations, stamp.ObservedAnnotation, "")...)
		} else {
			// A nudge or an update that keeps the template: what is stored still
			// describes the pods.
			patches = append(patches, keep()...)
		}
		return respond(patches, warnings...), resultTooLarge
	}

	// The template gets the stamp, and the metadata the record of it.
	patches = append(patches, templatePatch(&tmpl.ObjectMeta, tmplSet)...)
	newRecord := ""
	if want.Hash != "" {
		newRecord = stamp.Observed{Hash: want.Hash, Template: stamp.TemplateFingerprint(tmpl), Secrets: stamp.HasSecrets(srcs)}.String()
	}
	// A rollout configstamp causes (a nudge that changes the template) says why in the
	// change cause `kubectl rollout history` shows.
	cause, hasCause := annotations[stamp.ChangeCauseAnnotation], false
	if nudged && !templateChanged && (want.Hash != storedHash || restartedAt != "") {
		ran := ""
		if certain {
			ran = rec.Hash
		}
		cause, hasCause = stamp.ChangeCause(stamp.Rollout{StoredHash: storedHash, StoredSources: stored.Annotations[stamp.SourcesAnnotation],
			Hash: want.Hash, Sources: want.SourcesAnnotation(), Ran: ran, Restart: restartedAt != ""}), true
		if !stamp.AnnotationsFitWithin(annotations, map[string]string{stamp.ObservedAnnotation: newRecord, stamp.NudgeAnnotation: "", stamp.ChangeCauseAnnotation: cause},
			stamp.CauseHeadroom) {
			// No room for it, leaving the controller room for its own annotations on the
			// rollout's ReplicaSet (CauseHeadroom): no cause rather than an earlier
			// rollout's (removing one only shrinks).
			cause = ""
		}
	}
	if !stamp.AnnotationsFit(annotations, map[string]string{stamp.ObservedAnnotation: newRecord, stamp.NudgeAnnotation: ""}) {
		// The stamp fits but the record does not: stamp without one (the watcher then
		// judges this workload from its stamp and the times of its pods and config).
		log.Info("Stamped without a record: it would exceed the annotation size limit", "namespace", namespace, "name", name,
			"operation", string(req.Operation), "user", req.UserInfo.Username, "limit", stamp.AnnotationSizeLimit)
		warnings = append(warnings, fmt.Sprintf("configstamp: stamped without its record of the config the pods run: the %s's annotations are near the API server's limit of %d bytes",
			kind.Kind, stamp.AnnotationSizeLimit))
		if req.DryRun == nil || !*req.DryRun {
			recordsOmitted.Inc()
		}
		newRecord = ""
	}
	patches = append(patches, annotationPatch(annotations, stamp.ObservedAnnotation, newRecord)...)
	if hasCause {
		patches = append(patches, annotationPatch(annotations, stamp.ChangeCauseAnnotation, cause)...)
	}
	if len(unmet) > 0 {
		warnings = append(warnings, "configstamp: required config is missing, the new pods cannot start until it exists: "+strings.Join(unmet, "; "))
	}
	resp := respond(patches, warnings...)
	if want.Hash != "" {
		resp.AuditAnnotations = map[string]string{AuditHash: want.Hash, AuditSources: want.SourcesAnnotation()}
	}
	if want.Hash == basis {
		return resp, resultUnchanged
	}
	dryRun := req.DryRun != nil && *req.DryRun
	log.Info("Stamped config hash",
		"namespace", namespace, "name", name, "operation", string(req.Operation),
		"user", req.UserInfo.Username, "oldHash", basis, "newHash", want.Hash,
		"sources", want.SourcesAnnotation(), "dryRun", dryRun)
	if !dryRun {
		stampsChanged.Inc()
	}
	return resp, resultStamped
}

// annotationPatch makes the metadata annotation key hold value (absent when value is
// empty), given the incoming annotations: nothing when it already does.
func annotationPatch(cur map[string]string, key, value string) []jsonpatch.JsonPatchOperation {
	got, has := cur[key]
	switch {
	case value == "" && has:
		return []jsonpatch.JsonPatchOperation{jsonpatch.NewOperation("remove", "/metadata/annotations/"+escape(key), nil)}
	case value == "" || (has && got == value):
		return nil
	case cur == nil:
		return []jsonpatch.JsonPatchOperation{jsonpatch.NewOperation("add", "/metadata/annotations", map[string]string{key: value})}
	}
	return []jsonpatch.JsonPatchOperation{jsonpatch.NewOperation("add", "/metadata/annotations/"+escape(key), value)}
}

// current reports whether the stamp and the record an update carries differ from the
// stored ones and are what configstamp would write now: a reinvocation after its own
// patch (another webhook changed the object since). It reads config only when they
// differ; the error is that read's.
func (s *Stamper) current(ctx context.Context, namespace string, annotations map[string]string, tmpl *corev1.PodTemplateSpec, srcs []stamp.Source, storedHash, storedRecord string) (bool, error) {
	hash, record := tmpl.Annotations[stamp.HashAnnotation], annotations[stamp.ObservedAnnotation]
	if (hash == "" || hash == storedHash) && (record == "" || record == storedRecord) {
		return false, nil
	}
	want, err := s.reader().Stamp(ctx, namespace, srcs)
	if err != nil {
		return false, err
	}
	if want.Hash == "" || hash != want.Hash {
		return false, nil
	}
	rec, ok := stamp.ObservedFor(annotations, tmpl)
	return ok && rec.Hash == want.Hash, nil
}

func (s *Stamper) kinds() []*workload.Kind {
	if len(s.Kinds) > 0 {
		return s.Kinds
	}
	return workload.Builtin()
}

func (s *Stamper) reader() *configread.Reader {
	return &configread.Reader{Client: s.Reader, Cache: s.Cache, Key: s.Key, Timeout: s.readTimeout()}
}

// restoreStamp puts the stored stamp (and restart annotation) back into an incoming
// template that dropped or changed them: nothing when they agree or nothing was stored.
func restoreStamp(stored, incoming *metav1.ObjectMeta) []jsonpatch.JsonPatchOperation {
	hash := stored.Annotations[stamp.HashAnnotation]
	if hash == "" {
		return nil
	}
	want := stamp.TemplateAnnotations(hash, stored.Annotations[stamp.SourcesAnnotation], stored.Annotations[stamp.RestartedAnnotation])
	if !stamp.AnnotationsFit(incoming.Annotations, want) {
		// The update filled the template's annotations: the stored stamp put back would
		// make the API server refuse it. Drop configstamp's instead (removing only
		// shrinks); the watcher re-checks an unstamped workload.
		return templatePatch(incoming, unstamped)
	}
	return templatePatch(incoming, want)
}

func (s *Stamper) readTimeout() time.Duration {
	if s.ReadTimeout > 0 {
		return s.ReadTimeout
	}
	return DefaultReadTimeout
}

func decode(kind *workload.Kind, raw []byte) (client.Object, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("empty object")
	}
	obj := kind.New()
	if err := json.Unmarshal(raw, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// templatePatch returns the smallest JSON patch that makes the template's annotations
// carry every key of want (an empty value: the key absent): nothing when they already do.
func templatePatch(meta *metav1.ObjectMeta, want map[string]string) []jsonpatch.JsonPatchOperation {
	const base = "/spec/template/metadata"
	cur := meta.Annotations
	var ops []jsonpatch.JsonPatchOperation
	adds := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		got, has := cur[k]
		switch v := want[k]; {
		case v == "" && has:
			ops = append(ops, jsonpatch.NewOperation("remove", base+"/annotations/"+escape(k), nil))
		case v != "" && (!has || got != v):
			adds[k] = v
		}
	}
	switch {
	case len(adds) == 0:
		return ops
	case equality.Semantic.DeepEqual(*meta, metav1.ObjectMeta{}):
		// The template has no metadata worth keeping (and the member may be absent).
		return []jsonpatch.JsonPatchOperation{jsonpatch.NewOperation("add", base, map[string]any{"annotations": adds})}
	case cur == nil:
		return []jsonpatch.JsonPatchOperation{jsonpatch.NewOperation("add", base+"/annotations", adds)}
	}
	for _, k := range slices.Sorted(maps.Keys(adds)) {
		ops = append(ops, jsonpatch.NewOperation("add", base+"/annotations/"+escape(k), adds[k]))
	}
	return ops
}

// unstamped removes configstamp's annotations from a template (templatePatch).
var unstamped = map[string]string{stamp.HashAnnotation: "", stamp.SourcesAnnotation: "", stamp.RestartedAnnotation: ""}

// escape makes a map key a JSON pointer token (RFC 6901).
func escape(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

func respond(patches []jsonpatch.JsonPatchOperation, warnings ...string) admission.Response {
	resp := admission.Allowed("")
	if len(patches) > 0 {
		resp = admission.Patched("", patches...)
	}
	if len(warnings) > 0 {
		// The API server drops a warning that is not valid UTF-8 or holds control
		// characters (an error's text may): make each one it passes on.
		clean := make([]string, len(warnings))
		for i, w := range warnings {
			clean[i] = strings.Map(func(r rune) rune {
				if unicode.IsControl(r) {
					return ' '
				}
				return r
			}, strings.ToValidUTF8(w, "?"))
		}
		resp = resp.WithWarnings(clean...)
	}
	return resp
}
