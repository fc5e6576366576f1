package webhook

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/internal/decide"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// input is one admission request of a stamped kind, decoded: all its plan is made from.
type input struct {
	kind *workload.Kind
	// old is the stored object (nil on CREATE).
	old client.Object
	// reqNamespace and reqName are the request's; namespace and name the object's (its
	// namespace is the request's: Stamper.outside).
	reqNamespace, reqName, namespace, name string
	operation, user                        string
	dryRun                                 bool
	// now is the restart time, should the plan set one.
	now time.Time

	// annotations are the incoming metadata annotations; own are those that say what to
	// stamp (skip, extra sources): annotations, with an owner's where it has none
	// (workload.WithOwner).
	annotations, own map[string]string
	// tmpl is the incoming pod template (nil: none of its own); problem says why it does
	// not decode.
	tmpl    *corev1.PodTemplateSpec
	problem string
	// skip: opted out.
	skip bool
	// marked: it carries the marker (stripped whoever set it); nudged and recording:
	// configstamp's own nudge, or its own write of a record.
	marked, nudged, recording bool
	// resumed: an UPDATE that resumes a paused workload. The watcher holds config changes
	// while it is paused; this write, which rolls it, takes the config current now (one
	// rollout, not one for the resume and one for a nudge after it).
	resumed bool
	// nudgeKey is the key fingerprint a nudge names ("": none).
	nudgeKey string
	// partial: its controller replaces pods only when deleted or above a partition
	// (workload.Kind.Behind), so a new template leaves older pods running.
	partial bool
	// oldBehind is how many pods the stored object's status shows on older templates
	// than the stored one (workload.Kind.Behind; 0 on a CREATE).
	oldBehind int32

	// The rest is set only for a template to stamp (tmpl set, no problem, not skipped).
	extraProblems []string
	// overCap: it consumes more sources than capacity (stamp.Options.SourceCap); then
	// the fields below srcs are unset.
	overCap  bool
	capacity int
	// stored is the template metadata whose stamp is stored (the old object's, else the
	// incoming one's); storedHash its stamp.
	stored     *metav1.ObjectMeta
	storedHash string
	// templateChanged: a new template or new extra sources, so new pods.
	templateChanged bool
	// record holds the stored record (the old object's annotations, or the incoming
	// ones when configstamp writes it); rec is that record when valid for tmpl.
	record   map[string]string
	rec      stamp.Observed
	recValid bool
	// oldRec is the stored record when valid for the stored template (oldRecValid).
	oldRec      stamp.Observed
	oldRecValid bool
	srcs        []stamp.Source
	// basis is what the pods are judged to run; certain: it is the record's.
	basis   string
	certain bool
}

// undecodable is an object of the review that does not decode as its kind.
type undecodable struct {
	field string // "object" or "oldObject"
	msg   string // the log message
	err   error
}

func (u *undecodable) Error() string { return "decode " + u.field + ": " + u.err.Error() }
func (u *undecodable) Unwrap() error { return u.err }

// decodeReview decodes the object of a CREATE or UPDATE of kind, and an UPDATE's old
// object (nil on CREATE).
func decodeReview(kind *workload.Kind, req admission.Request) (obj, old client.Object, _ *undecodable) {
	obj, err := decode(kind, req.Object.Raw)
	if err != nil {
		return nil, nil, &undecodable{"object", "Rejected undecodable object", err}
	}
	if req.Operation == admissionv1.Update {
		if old, err = decode(kind, req.OldObject.Raw); err != nil {
			return nil, nil, &undecodable{"oldObject", "Rejected undecodable old object", err}
		}
	}
	return obj, old, nil
}

// input is the admission of obj (old: the stored object of an UPDATE), decoded from req
// and inside its boundaries (Stamper.outside): the object's namespace is the request's.
// owner are the annotations of its controller (Stamper.owner; nil: none).
func (s *Stamper) input(kind *workload.Kind, req admission.Request, obj, old client.Object, owner map[string]string) *input {
	in := &input{kind: kind, old: old, reqNamespace: req.Namespace, reqName: req.Name, namespace: req.Namespace, name: obj.GetName(),
		operation: string(req.Operation), user: req.UserInfo.Username, dryRun: req.DryRun != nil && *req.DryRun, now: time.Now()}
	in.annotations = obj.GetAnnotations()
	in.own = workload.WithOwner(in.annotations, owner)
	marker := stamp.ParseMarker(in.annotations)
	// Only configstamp's own marker counts: a leftover one (the webhook was down when it
	// was set), one copied back by rollout undo, or one set by hand is stripped and ignored.
	ours := marker.Present && s.trusts(in.user)
	in.marked, in.nudged, in.recording = marker.Present, ours && marker.Nudge, ours && marker.Record
	in.resumed = old != nil && kind.Paused(old) && !kind.Paused(obj)
	_, _, in.partial = kind.Behind(obj)
	if old != nil {
		in.oldBehind, _, _ = kind.Behind(old)
	}
	if in.nudged {
		in.nudgeKey = marker.Key
	}
	in.tmpl, in.problem = kind.Template(obj), kind.Problem(obj)
	in.skip = stamp.IsTrue(in.own[stamp.SkipAnnotation])
	if in.tmpl != nil && in.problem == "" && !in.skip {
		in.consumed(s.Sources)
	}
	return in
}

// consumed reads what the template consumes, and the stamp and record stored for it.
func (in *input) consumed(opts stamp.Options) {
	if v, ok := in.own[stamp.ExtraSourcesAnnotation]; ok {
		_, in.extraProblems = stamp.ExtraSources(v, opts)
	}
	// The stamp and the record are configstamp's: an UPDATE that drops or changes them
	// (kubectl replace, rollout undo) does not change what they say.
	in.stored, in.templateChanged = &in.tmpl.ObjectMeta, true
	var oldTmpl *corev1.PodTemplateSpec
	if in.old != nil {
		oldTmpl = in.kind.Template(in.old)
	}
	if oldTmpl != nil {
		in.stored = &oldTmpl.ObjectMeta
		in.templateChanged = !stamp.SameTemplate(oldTmpl, in.tmpl) ||
			in.old.GetAnnotations()[stamp.ExtraSourcesAnnotation] != in.annotations[stamp.ExtraSourcesAnnotation]
		in.record = in.old.GetAnnotations()
		in.oldRec, in.oldRecValid = stamp.ObservedFor(in.record, oldTmpl)
	}
	if in.recording {
		in.record = in.annotations
	}
	in.storedHash = in.stored.Annotations[stamp.HashAnnotation]
	in.srcs = stamp.Consumed(in.own, &in.tmpl.Spec, opts)
	if in.overCap = opts.OverCap(in.srcs); in.overCap {
		in.capacity = opts.SourceCap()
		return
	}
	in.rec, in.recValid = stamp.ObservedFor(in.record, in.tmpl)
	in.basis, in.certain = decide.Basis(in.storedHash, in.rec, in.recValid, in.srcs)
}

// observed is the record of hash, computed under the key whose fingerprint is key, for
// the incoming template.
func (in *input) observed(hash, key string) string {
	return in.observedBehind(hash, key, "")
}

// observedBehind is observed, with the config older pods still run (behind; "": none).
func (in *input) observedBehind(hash, key, behind string) string {
	return stamp.Observed{Hash: hash, Template: stamp.TemplateFingerprint(in.tmpl), Secrets: stamp.HasSecrets(in.srcs), Key: key, Behind: behind}.String()
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

// trusts reports whether user's markers count: configstamp's own (Self) or its watcher's
// (Watchers, when the watcher runs as another user). Anyone's when neither is known;
// Watchers alone when Self is unknown (they name the watcher: a tenant's still do not count).
func (s *Stamper) trusts(user string) bool {
	if s.Self == "" && len(s.Watchers) == 0 {
		return true
	}
	return user == s.Self || slices.Contains(s.Watchers, user)
}

// storedSources is the sources annotation stored for the template ("" when none).
func (in *input) storedSources() string {
	if in.stored == nil {
		return ""
	}
	return in.stored.Annotations[stamp.SourcesAnnotation]
}
