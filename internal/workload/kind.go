// Package workload holds what configstamp knows about each kind of workload it stamps:
// which object it is, what users call it, where its pod template lives, how to list it,
// and when the pods of its current template began to be created (kubectl's polymorphic
// helpers are the model). A new kind is an entry here plus its registration, RBAC and
// kind-specific pod history: docs/development.md, "Adding a workload kind".
package workload

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
)

// Kind is one kind of workload.
type Kind struct {
	// Group, Version, Kind and Resource (plural) name it in the API.
	Group, Version, Kind, Resource string
	// ShortNames are what a user may type for it besides the lowercase kind and
	// resource (kubectl's short names).
	ShortNames []string

	newObject func() client.Object
	newList   func() client.ObjectList
	template  func(client.Object) *corev1.PodTemplateSpec
	selector  func(client.Object) *metav1.LabelSelector
	// observed is the generation the workload's controller has seen (its status);
	// nil for kinds whose pod history is read from ReplicaSets.
	observed func(client.Object) int64
	// revision, when set, names the ControllerRevision of the current template
	// (a StatefulSet's status.updateRevision); without it, the newest one.
	revision func(client.Object) string
	// hashLabel is the label the kind's controller adds to the template of the
	// ReplicaSets it owns (ReplicaSet history only).
	hashLabel string
	// currentHash, when set, names the current ReplicaSet by its hashLabel value, and
	// says whether the controller has seen the current generation; without it, the
	// current ReplicaSet is the one whose template equals the workload's.
	currentHash func(client.Object) (hash string, observed bool)
	// problem, when set, says why obj's template could not be read (nil: it could).
	problem func(client.Object) string
	// templatePath is where template's result is in the object's JSON.
	templatePath string
	// paused, when set, reports whether the workload's controller is told to roll
	// nothing (a paused Deployment): a change of its template waits for the resume.
	// pausedPath is that boolean's JSON pointer.
	paused     func(client.Object) bool
	pausedPath string
	// behind, when set, tells for a workload whose controller replaces pods only when
	// they are deleted or above a partition (partial) how many pods (of total) its
	// status shows on older templates.
	behind func(client.Object) (behind, total int32, partial bool)
	// noPods: the workload runs no pods of its own; objects it creates later copy its
	// template (a CronJob's Jobs). See NoPods.
	noPods bool
	// createOnly: its pod template cannot change after CREATE (a Job). See CreateOnly.
	createOnly bool
	// health reads a full object's rollout (Health); nil: ready at once (no pods).
	health func(client.Object) Health
	// annotationOwner is the kind of controller whose configstamp annotations the
	// workload takes where it has none of its own (a Job's CronJob). See AnnotationOwner.
	annotationOwner *Kind
	// reduce is a new object of the kind with obj's fields that the functions above read,
	// and meta, tmpl (nil: none) and sel in place of its metadata, pod template and
	// selector (Trim).
	reduce func(obj client.Object, meta metav1.ObjectMeta, tmpl *corev1.PodTemplateSpec, sel *metav1.LabelSelector) client.Object
	// compact: Compact makes a Cached of the kind's workloads.
	compact bool
}

// GVK is the kind's GroupVersionKind.
func (k *Kind) GVK() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: k.Group, Version: k.Version, Kind: k.Kind}
}

// GVR is the kind's GroupVersionResource.
func (k *Kind) GVR() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: k.Group, Version: k.Version, Resource: k.Resource}
}

// New returns an empty object of the kind.
func (k *Kind) New() client.Object { return k.newObject() }

// NewList returns an empty list of the kind.
func (k *Kind) NewList() client.ObjectList { return k.newList() }

// Ref returns an object of the kind carrying only its key (for queueing).
func (k *Kind) Ref(key client.ObjectKey) client.Object {
	obj := k.newObject()
	obj.SetNamespace(key.Namespace)
	obj.SetName(key.Name)
	return obj
}

// Items returns the objects of a list of the kind (pointers into it).
func (k *Kind) Items(list client.ObjectList) []client.Object {
	var out []client.Object
	_ = apimeta.EachListItem(list, func(o runtime.Object) error {
		if obj, ok := o.(client.Object); ok {
			out = append(out, obj)
		}
		return nil
	})
	return out
}

// Template returns the pod template of obj, nil when it has none of its own (a Rollout
// that refers to a Deployment's template) or obj is not of the kind. Of a trimmed
// object (Trim), a new template with its references to sources decoded; of a whole
// one, the object's own.
func (k *Kind) Template(obj client.Object) *corev1.PodTemplateSpec {
	t := k.templateOf(obj)
	if t == nil {
		return nil
	}
	return expanded(t)
}

// TemplatePath is the JSON pointer (RFC 6901) of the pod template in an object of the
// kind, where the webhook's patches go: "/spec/template".
func (k *Kind) TemplatePath() string { return k.templatePath }

// Problem says why obj's pod template could not be read ("" when it could, or it has
// none of its own).
func (k *Kind) Problem(obj client.Object) string {
	if k.problem == nil {
		return ""
	}
	return k.problem(obj)
}

// Paused reports whether obj's controller rolls nothing for now (a Deployment's
// spec.paused); false for kinds that cannot be paused.
func (k *Kind) Paused(obj client.Object) bool {
	if c, ok := cachedOf(obj); ok {
		return c.Paused
	}
	return k.paused != nil && k.paused(obj)
}

// Behind reports, for a workload whose controller replaces its pods only when they are
// deleted (updateStrategy OnDelete) or above a partition (a StatefulSet's
// rollingUpdate.partition) — partial — how many of its pods (of total) its controller's
// status shows on an older template than the current one: all of them while the
// controller has not seen the current generation. Other workloads (their controller
// replaces every pod; false for their kinds) give 0, 0, false.
func (k *Kind) Behind(obj client.Object) (behind, total int32, partial bool) {
	if c, ok := cachedOf(obj); ok {
		return c.Behind, c.Total, c.Partial
	}
	if k.behind == nil {
		return 0, 0, false
	}
	return k.behind(obj)
}

// NoPods reports whether the kind runs no pods of its own: its template is copied into
// objects it creates later (a CronJob's Jobs), whose pods read the config as it is then.
// Stamping it rolls nothing, so every change of its config is stamped
// (decide.Input.NoPods), and nothing is started.
func (k *Kind) NoPods() bool { return k.noPods }

// CreateOnly reports whether the kind's pod template cannot change after CREATE (a
// Job): it is stamped at CREATE only (its registration sends no UPDATE) and the watcher
// never checks or writes it.
func (k *Kind) CreateOnly() bool { return k.createOnly }

// AnnotationOwner returns the kind and reference of obj's controller when it is of the
// kind whose configstamp.io/extra-sources and configstamp.io/skip obj takes where it has
// none of its own: a CronJob, as its controller copies only jobTemplate.metadata into its
// Jobs. Nil when obj has no such controller. An ownerReference names an object of obj's
// own namespace, so a forged one can only point at a CronJob there.
func (k *Kind) AnnotationOwner(obj client.Object) (*Kind, *metav1.OwnerReference) {
	o := k.annotationOwner
	if o == nil {
		return nil, nil
	}
	ref := metav1.GetControllerOfNoCopy(obj)
	if ref == nil || ref.Name == "" || ref.Kind != o.Kind || ref.APIVersion != o.GVK().GroupVersion().String() {
		return nil, nil
	}
	return o, ref
}

// OwnerAnnotations are the annotations a workload takes from its controller
// (workload.Kind.AnnotationOwner) where it has none of its own: a CronJob's controller
// copies only jobTemplate.metadata into its Jobs, so without them a Job's stamp would
// leave out its CronJob's extra sources, or stamp a Job of a skipped CronJob.
var OwnerAnnotations = []string{stamp.ExtraSourcesAnnotation, stamp.SkipAnnotation}

// WithOwner is annotations with owner's value of each OwnerAnnotations key it lacks
// (annotations itself when it takes none).
func WithOwner(annotations, owner map[string]string) map[string]string {
	out := annotations
	for _, k := range OwnerAnnotations {
		v, ok := owner[k]
		if _, has := annotations[k]; !ok || has {
			continue
		}
		if len(out) == len(annotations) {
			out = maps.Clone(annotations)
			if out == nil {
				out = map[string]string{}
			}
		}
		out[k] = v
	}
	return out
}

// PausedPath is the JSON pointer of the boolean Paused reads ("" for kinds that cannot be
// paused).
func (k *Kind) PausedPath() string { return k.pausedPath }

// String is the kind's name, e.g. "Deployment".
func (k *Kind) String() string { return k.Kind }

// Path is where the API server sends the kind's admission reviews, e.g.
// /mutate-apps-v1-deployment.
func (k *Kind) Path() string {
	return "/mutate-" + strings.ReplaceAll(k.Group, ".", "-") + "-" + k.Version + "-" + strings.ToLower(k.Kind)
}

// EntryName is the name of the registration entry for workloads in opted-in namespaces.
// It has three dot-separated parts because the API server prefixes the audit
// annotations with it (deployments.configstamp.io/config-hash).
func (k *Kind) EntryName() string { return k.Resource + ".configstamp.io" }

// LabelEntryName is the name of the registration entry for workloads opted in by their
// own label in namespaces that are not.
func (k *Kind) LabelEntryName() string { return k.Resource + ".by-label.configstamp.io" }

// The kinds configstamp stamps.
var (
	Deployment = &Kind{
		compact: true,
		Group:   "apps", Version: "v1", Kind: "Deployment", Resource: "deployments", ShortNames: []string{"deploy"},
		newObject:    func() client.Object { return &appsv1.Deployment{} },
		newList:      func() client.ObjectList { return &appsv1.DeploymentList{} },
		templatePath: "/spec/template",
		template: func(o client.Object) *corev1.PodTemplateSpec {
			if d, ok := o.(*appsv1.Deployment); ok {
				return &d.Spec.Template
			}
			return nil
		},
		selector:  func(o client.Object) *metav1.LabelSelector { return o.(*appsv1.Deployment).Spec.Selector },
		hashLabel: appsv1.DefaultDeploymentUniqueLabelKey,
		paused: func(o client.Object) bool {
			d, ok := o.(*appsv1.Deployment)
			return ok && d.Spec.Paused
		},
		pausedPath: "/spec/paused",
		health:     deploymentHealth,
		reduce: func(o client.Object, meta metav1.ObjectMeta, tmpl *corev1.PodTemplateSpec, sel *metav1.LabelSelector) client.Object {
			d, ok := o.(*appsv1.Deployment)
			if !ok {
				return o
			}
			out := &appsv1.Deployment{TypeMeta: d.TypeMeta, ObjectMeta: meta, Status: deploymentHealthStatus(d.Status)}
			out.Spec.Selector, out.Spec.Paused = sel, d.Spec.Paused
			out.Spec.Replicas, out.Spec.ProgressDeadlineSeconds = d.Spec.Replicas, d.Spec.ProgressDeadlineSeconds // Health
			if tmpl != nil {
				out.Spec.Template = *tmpl
			}
			return out
		},
	}
	StatefulSet = &Kind{
		compact: true,
		Group:   "apps", Version: "v1", Kind: "StatefulSet", Resource: "statefulsets", ShortNames: []string{"sts"},
		newObject:    func() client.Object { return &appsv1.StatefulSet{} },
		newList:      func() client.ObjectList { return &appsv1.StatefulSetList{} },
		templatePath: "/spec/template",
		template: func(o client.Object) *corev1.PodTemplateSpec {
			if s, ok := o.(*appsv1.StatefulSet); ok {
				return &s.Spec.Template
			}
			return nil
		},
		selector: func(o client.Object) *metav1.LabelSelector { return o.(*appsv1.StatefulSet).Spec.Selector },
		observed: func(o client.Object) int64 { return o.(*appsv1.StatefulSet).Status.ObservedGeneration },
		revision: func(o client.Object) string { return o.(*appsv1.StatefulSet).Status.UpdateRevision },
		health:   statefulSetHealth,
		behind: func(o client.Object) (int32, int32, bool) {
			s, ok := o.(*appsv1.StatefulSet)
			if !ok {
				return 0, 0, false
			}
			u := s.Spec.UpdateStrategy
			partial := u.Type == appsv1.OnDeleteStatefulSetStrategyType ||
				u.RollingUpdate != nil && u.RollingUpdate.Partition != nil && *u.RollingUpdate.Partition > 0
			// OnDelete never moves currentRevision: updatedReplicas counts the pods on
			// updateRevision.
			return behindOf(s.Status.ObservedGeneration < s.Generation, s.Status.Replicas, s.Status.UpdatedReplicas, partial)
		},
		reduce: func(o client.Object, meta metav1.ObjectMeta, tmpl *corev1.PodTemplateSpec, sel *metav1.LabelSelector) client.Object {
			s, ok := o.(*appsv1.StatefulSet)
			if !ok {
				return o
			}
			out := &appsv1.StatefulSet{TypeMeta: s.TypeMeta, ObjectMeta: meta, Status: appsv1.StatefulSetStatus{
				ObservedGeneration: s.Status.ObservedGeneration, CurrentRevision: s.Status.CurrentRevision, UpdateRevision: s.Status.UpdateRevision,
				Replicas: s.Status.Replicas, UpdatedReplicas: s.Status.UpdatedReplicas, ReadyReplicas: s.Status.ReadyReplicas}}
			out.Spec.Selector, out.Spec.UpdateStrategy, out.Spec.Replicas = sel, s.Spec.UpdateStrategy, s.Spec.Replicas
			if tmpl != nil {
				out.Spec.Template = *tmpl
			}
			return out
		},
	}
	DaemonSet = &Kind{
		compact: true,
		Group:   "apps", Version: "v1", Kind: "DaemonSet", Resource: "daemonsets", ShortNames: []string{"ds"},
		newObject:    func() client.Object { return &appsv1.DaemonSet{} },
		newList:      func() client.ObjectList { return &appsv1.DaemonSetList{} },
		templatePath: "/spec/template",
		template: func(o client.Object) *corev1.PodTemplateSpec {
			if d, ok := o.(*appsv1.DaemonSet); ok {
				return &d.Spec.Template
			}
			return nil
		},
		selector: func(o client.Object) *metav1.LabelSelector { return o.(*appsv1.DaemonSet).Spec.Selector },
		observed: func(o client.Object) int64 { return o.(*appsv1.DaemonSet).Status.ObservedGeneration },
		health:   daemonSetHealth,
		behind: func(o client.Object) (int32, int32, bool) {
			d, ok := o.(*appsv1.DaemonSet)
			if !ok {
				return 0, 0, false
			}
			partial := d.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType
			return behindOf(d.Status.ObservedGeneration < d.Generation, d.Status.DesiredNumberScheduled, d.Status.UpdatedNumberScheduled, partial)
		},
		reduce: func(o client.Object, meta metav1.ObjectMeta, tmpl *corev1.PodTemplateSpec, sel *metav1.LabelSelector) client.Object {
			d, ok := o.(*appsv1.DaemonSet)
			if !ok {
				return o
			}
			out := &appsv1.DaemonSet{TypeMeta: d.TypeMeta, ObjectMeta: meta, Status: appsv1.DaemonSetStatus{ObservedGeneration: d.Status.ObservedGeneration,
				DesiredNumberScheduled: d.Status.DesiredNumberScheduled, UpdatedNumberScheduled: d.Status.UpdatedNumberScheduled, NumberAvailable: d.Status.NumberAvailable}}
			out.Spec.Selector, out.Spec.UpdateStrategy = sel, d.Spec.UpdateStrategy
			if tmpl != nil {
				out.Spec.Template = *tmpl
			}
			return out
		},
	}
)

// CronJob and Job are batch/v1's. A CronJob's template is its jobTemplate's, copied into
// every Job it creates (the cronjob controller's, or kubectl create job --from); a
// Job's template is immutable, so a Job is stamped at its CREATE only.
var (
	CronJob = &Kind{
		Group: "batch", Version: "v1", Kind: "CronJob", Resource: "cronjobs", ShortNames: []string{"cj"},
		newObject:    func() client.Object { return &batchv1.CronJob{} },
		newList:      func() client.ObjectList { return &batchv1.CronJobList{} },
		templatePath: "/spec/jobTemplate/spec/template",
		template: func(o client.Object) *corev1.PodTemplateSpec {
			if c, ok := o.(*batchv1.CronJob); ok {
				return &c.Spec.JobTemplate.Spec.Template
			}
			return nil
		},
		noPods: true,
		reduce: func(o client.Object, meta metav1.ObjectMeta, tmpl *corev1.PodTemplateSpec, sel *metav1.LabelSelector) client.Object {
			c, ok := o.(*batchv1.CronJob)
			if !ok {
				return o
			}
			out := &batchv1.CronJob{TypeMeta: c.TypeMeta, ObjectMeta: meta}
			if tmpl != nil {
				out.Spec.JobTemplate.Spec.Template = *tmpl
			}
			return out
		},
	}
	Job = &Kind{
		Group: "batch", Version: "v1", Kind: "Job", Resource: "jobs",
		newObject:    func() client.Object { return &batchv1.Job{} },
		newList:      func() client.ObjectList { return &batchv1.JobList{} },
		templatePath: "/spec/template",
		template: func(o client.Object) *corev1.PodTemplateSpec {
			if j, ok := o.(*batchv1.Job); ok {
				return &j.Spec.Template
			}
			return nil
		},
		createOnly:      true,
		annotationOwner: CronJob,
	}
)

// jobStarted is Kind.PodsSince of a Job: when its controller started it (status.startTime,
// set again at each resume); not yet (ok false) while it is suspended or not started.
func jobStarted(obj client.Object) (time.Time, bool, error) {
	j, ok := obj.(*batchv1.Job)
	if !ok || j.Status.StartTime == nil {
		return time.Time{}, false, nil
	}
	return j.Status.StartTime.Time, true, nil
}

// behindOf is Kind.Behind from a controller's status: total pods, updated of them on
// the current template; unobserved: the controller has not seen the current generation.
func behindOf(unobserved bool, total, updated int32, partial bool) (int32, int32, bool) {
	switch {
	case unobserved:
		return total, total, partial
	case updated >= total:
		return 0, total, partial
	}
	return total - updated, total, partial
}

// Builtin are the kinds every cluster has.
func Builtin() []*Kind { return []*Kind{Deployment, StatefulSet, DaemonSet, CronJob, Job} }

// Watched are those of kinds the watcher checks and writes: all but the CreateOnly ones.
func Watched(kinds []*Kind) []*Kind {
	var out []*Kind
	for _, k := range kinds {
		if !k.createOnly {
			out = append(out, k)
		}
	}
	return out
}

// All are the kinds configstamp knows: the builtin ones, then those of CRDs.
func All() []*Kind { return append(Builtin(), Rollout) }

// Names are what a user may type for the kind: its kind and resource in lowercase, and
// its short names.
func (k *Kind) Names() []string {
	return append([]string{strings.ToLower(k.Kind), k.Resource}, k.ShortNames...)
}

// Find returns the kind of kinds with this API group and kind, nil when none.
func Find(kinds []*Kind, group, kind string) *Kind {
	for _, k := range kinds {
		if k.Group == group && k.Kind == kind {
			return k
		}
	}
	return nil
}

// PodsSince returns when the pods of obj's current template began to be created, read
// live through r: for kinds that roll through ReplicaSets, the creation of the
// ReplicaSet that runs that template (for Rollouts, the one of status.currentPodHash);
// for StatefulSets and DaemonSets, the latest write of the ControllerRevision of the
// current template (a StatefulSet's status.updateRevision, else the newest: reused
// revisions are written again when they become current), once their controller has
// seen the current generation. Without any
// (no pods yet, or no controller), the workload's creation. ok is false when the
// controller has not yet taken the current template in: its pods are still to be
// created, and will read the config as it is. A kind that runs no pods of its own (a
// CronJob) is always so; one whose template cannot change (a Job) runs it since it
// started (status.startTime: not at its creation when it was created suspended, as
// Kueue's are, and not yet while it is).
func (k *Kind) PodsSince(ctx context.Context, r client.Reader, obj client.Object) (since time.Time, ok bool, err error) {
	switch {
	case k.noPods:
		return time.Time{}, false, nil
	case k.createOnly:
		return jobStarted(obj)
	}
	sel, err := metav1.LabelSelectorAsSelector(k.selectorOf(obj))
	if err != nil {
		return time.Time{}, false, fmt.Errorf("selector of %s %s/%s: %w", k.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	if k.observed != nil {
		return k.revisionsSince(ctx, r, obj, sel)
	}
	var rsList appsv1.ReplicaSetList
	if err := r.List(ctx, &rsList, client.InNamespace(obj.GetNamespace()), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return time.Time{}, false, fmt.Errorf("list replicasets of %s %s/%s: %w", k.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	var hash string
	observed := true
	if k.currentHash != nil {
		hash, observed = k.currentHash(obj)
	}
	owned := 0
	for i := range rsList.Items {
		rs := &rsList.Items[i]
		if owner := metav1.GetControllerOf(rs); owner == nil || owner.UID != obj.GetUID() {
			continue
		}
		owned++
		current := k.sameTemplate(&rs.Spec.Template, k.templateOf(obj))
		if k.currentHash != nil {
			current = observed && hash != "" && rs.Labels[k.hashLabel] == hash
		}
		if current {
			return rs.CreationTimestamp.Time, true, nil
		}
	}
	if owned == 0 {
		return obj.GetCreationTimestamp().Time, true, nil
	}
	return time.Time{}, false, nil
}

func (k *Kind) revisionsSince(ctx context.Context, r client.Reader, obj client.Object, sel labels.Selector) (time.Time, bool, error) {
	if k.observedOf(obj) < obj.GetGeneration() {
		return time.Time{}, false, nil
	}
	var list appsv1.ControllerRevisionList
	if err := r.List(ctx, &list, client.InNamespace(obj.GetNamespace()), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return time.Time{}, false, fmt.Errorf("list controllerrevisions of %s %s/%s: %w", k.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	var named string
	if c, ok := cachedOf(obj); ok {
		named = c.UpdateRevision
	} else if k.revision != nil {
		named = k.revision(obj)
	}
	var newest *appsv1.ControllerRevision
	for i := range list.Items {
		cr := &list.Items[i]
		if owner := metav1.GetControllerOf(cr); owner == nil || owner.UID != obj.GetUID() {
			continue
		}
		if named != "" && cr.Name == named {
			return LastWrite(cr), true, nil
		}
		if newest == nil || cr.Revision > newest.Revision {
			newest = cr
		}
	}
	if newest == nil {
		return obj.GetCreationTimestamp().Time, true, nil
	}
	return LastWrite(newest), true, nil
}

// observedOf is the generation obj's controller has seen (kinds with observed).
func (k *Kind) observedOf(obj client.Object) int64 {
	if c, ok := cachedOf(obj); ok {
		return c.ObservedGeneration
	}
	return k.observed(obj)
}

// sameTemplate compares a ReplicaSet's template with the workload's (trimmed or not),
// ignoring the pod-template-hash label the kind's controller adds: by their podsDigest.
func (k *Kind) sameTemplate(rs, own *corev1.PodTemplateSpec) bool {
	if own == nil {
		return false
	}
	want, ok := own.Annotations[podsDigestAnnotation]
	if !ok || !trimmed(own) {
		want = podsDigest(own, k.hashLabel)
	}
	return podsDigest(rs, k.hashLabel) == want
}

// LastWrite is when the object was last written, from its managed fields, or its
// creation time. Both are the API server's clock.
func LastWrite(obj metav1.Object) time.Time {
	t := obj.GetCreationTimestamp().Time
	for _, mf := range obj.GetManagedFields() {
		if mf.Time != nil && mf.Time.After(t) {
			t = mf.Time.Time
		}
	}
	return t
}
