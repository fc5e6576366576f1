// Package webhook is configstamp's mutating admission webhook: it stamps the hash of the
// config a Deployment's pods consume into their template, so a config change rolls them.
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/stamp"
)

// Path is where the API server sends Deployment admission reviews.
const Path = "/mutate-apps-v1-deployment"

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
	// Reader reads ConfigMaps live (manager.GetAPIReader()), never from a cache.
	Reader client.Reader
	// ReadTimeout bounds the reads of one admission.
	ReadTimeout time.Duration
	// Cache, when set, lets an unchanged ConfigMap be checked with a metadata-only read.
	Cache *configread.DigestCache
}

var _ admission.Handler = &Stamper{}

// Handle stamps CREATE and UPDATE of apps/v1 Deployments. Whatever goes wrong short of an
// undecodable object, it admits the request: it never blocks a deploy.
func (s *Stamper) Handle(ctx context.Context, req admission.Request) admission.Response {
	start := time.Now()
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
	if req.Kind.Group != "apps" || req.Kind.Kind != "Deployment" {
		return admission.Allowed("configstamp only stamps apps/v1 Deployments"), resultSkipped
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed(""), resultSkipped
	}
	dep, err := decode(req.Object.Raw)
	if err != nil {
		log.Error(err, "Rejected undecodable Deployment", "namespace", req.Namespace, "name", req.Name)
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode object: %w", err)), resultRejected
	}
	var old *appsv1.Deployment
	if req.Operation == admissionv1.Update {
		if old, err = decode(req.OldObject.Raw); err != nil {
			log.Error(err, "Rejected undecodable old Deployment", "namespace", req.Namespace, "name", req.Name)
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode oldObject: %w", err)), resultRejected
		}
	}

	var patches []jsonpatch.JsonPatchOperation
	nudged := dep.Annotations[stamp.NudgeAnnotation] != ""
	if _, ok := dep.Annotations[stamp.NudgeAnnotation]; ok {
		patches = append(patches, jsonpatch.NewOperation("remove", "/metadata/annotations/"+escape(stamp.NudgeAnnotation), nil))
	}
	if stamp.IsTrue(dep.Annotations[stamp.SkipAnnotation]) || !shouldStamp(req.Operation, old, dep, nudged) {
		return respond(patches, ""), resultSkipped
	}

	namespace := dep.Namespace
	if namespace == "" {
		namespace = req.Namespace
	}
	want, err := configread.Stamp(ctx, s.Reader, s.Cache, namespace, &dep.Spec.Template.Spec, s.readTimeout())
	if err != nil {
		log.Error(err, "Admitted without stamping: could not read config", "namespace", namespace, "name", dep.Name)
		return respond(patches, "configstamp: could not read config, Deployment admitted without a new config hash: "+err.Error()), resultReadError
	}

	patches = append(patches, templatePatch(&dep.Spec.Template.ObjectMeta, want)...)
	resp := respond(patches, "")
	if want.Hash != "" {
		resp.AuditAnnotations = map[string]string{AuditHash: want.Hash, AuditSources: want.SourcesAnnotation()}
	}
	oldHash := dep.Spec.Template.Annotations[stamp.HashAnnotation]
	if old != nil {
		oldHash = old.Spec.Template.Annotations[stamp.HashAnnotation]
	}
	if want.Hash == oldHash {
		return resp, resultUnchanged
	}
	dryRun := req.DryRun != nil && *req.DryRun
	log.Info("Stamped config hash",
		"namespace", namespace, "name", dep.Name, "operation", string(req.Operation),
		"user", req.UserInfo.Username, "oldHash", oldHash, "newHash", want.Hash,
		"sources", want.SourcesAnnotation(), "dryRun", dryRun)
	if !dryRun {
		stampsChanged.Inc()
	}
	return resp, resultStamped
}

func (s *Stamper) readTimeout() time.Duration {
	if s.ReadTimeout > 0 {
		return s.ReadTimeout
	}
	return DefaultReadTimeout
}

func decode(raw []byte) (*appsv1.Deployment, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("empty object")
	}
	var d appsv1.Deployment
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// shouldStamp implements lazy adoption: a CREATE is always stamped (it rolls out anyway);
// an UPDATE is stamped when the Deployment already carries a stamp, when the watcher
// nudged it, or when its pod template changes anyway. Someone else's no-op update of an
// unstamped Deployment is left alone, so installing configstamp rolls nothing.
func shouldStamp(op admissionv1.Operation, old, dep *appsv1.Deployment, nudged bool) bool {
	if op == admissionv1.Create || nudged {
		return true
	}
	if old.Spec.Template.Annotations[stamp.HashAnnotation] != "" || dep.Spec.Template.Annotations[stamp.HashAnnotation] != "" {
		return true
	}
	return !equality.Semantic.DeepEqual(withoutStamp(&old.Spec.Template), withoutStamp(&dep.Spec.Template))
}

func withoutStamp(t *corev1.PodTemplateSpec) *corev1.PodTemplateSpec {
	c := t.DeepCopy()
	delete(c.Annotations, stamp.HashAnnotation)
	delete(c.Annotations, stamp.SourcesAnnotation)
	if len(c.Annotations) == 0 {
		c.Annotations = nil
	}
	return c
}

// templatePatch returns the smallest JSON patch that makes the template's annotations
// carry want: nothing when they already do.
func templatePatch(meta *metav1.ObjectMeta, want stamp.Stamp) []jsonpatch.JsonPatchOperation {
	const base = "/spec/template/metadata"
	cur := meta.Annotations
	if want.Hash == "" {
		var ops []jsonpatch.JsonPatchOperation
		for _, k := range []string{stamp.HashAnnotation, stamp.SourcesAnnotation} {
			if _, ok := cur[k]; ok {
				ops = append(ops, jsonpatch.NewOperation("remove", base+"/annotations/"+escape(k), nil))
			}
		}
		return ops
	}
	wanted := map[string]string{stamp.HashAnnotation: want.Hash, stamp.SourcesAnnotation: want.SourcesAnnotation()}
	switch {
	case equality.Semantic.DeepEqual(*meta, metav1.ObjectMeta{}):
		// The template has no metadata worth keeping (and the member may be absent).
		return []jsonpatch.JsonPatchOperation{jsonpatch.NewOperation("add", base, map[string]any{"annotations": wanted})}
	case cur == nil:
		return []jsonpatch.JsonPatchOperation{jsonpatch.NewOperation("add", base+"/annotations", wanted)}
	}
	var ops []jsonpatch.JsonPatchOperation
	for _, k := range []string{stamp.HashAnnotation, stamp.SourcesAnnotation} {
		if v, ok := cur[k]; !ok || v != wanted[k] {
			ops = append(ops, jsonpatch.NewOperation("add", base+"/annotations/"+escape(k), wanted[k]))
		}
	}
	return ops
}

// escape makes a map key a JSON pointer token (RFC 6901).
func escape(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

func respond(patches []jsonpatch.JsonPatchOperation, warning string) admission.Response {
	resp := admission.Allowed("")
	if len(patches) > 0 {
		resp = admission.Patched("", patches...)
	}
	if warning != "" {
		resp = resp.WithWarnings(warning)
	}
	return resp
}
