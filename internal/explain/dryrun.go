package explain

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// DefaultDryRunTimeout bounds the webhook's dry-run when Cluster.DryRunTimeout is 0:
// longer than the chart's webhook.timeoutSeconds (5 s), after which the API server
// gives up on a webhook that does not answer.
const DefaultDryRunTimeout = 15 * time.Second

// dryRunSuffix names the dry-run copies (their generateName follows the workload's name).
const dryRunSuffix = "-configstamp-explain-"

// dryRunStamp asks configstamp's webhook for the stamp of the workload's config now,
// for a user who may not read the hash key: a server-side dry-run CREATE of a copy of
// the workload (same namespace, labels and pod spec, a generated name, without
// configstamp's annotations), which the API server sends through admission like a real
// create and stores nowhere. The webhook stamps every create it admits, so the
// response carries its config-hash and per-source digests (12-hex prefixes). content
// holds the sources read by "kind/name", for what each would lack (Digest.Unmet).
// It needs the right to create the workload's kind in its namespace.
func (c *Cluster) dryRunStamp(ctx context.Context, kind *workload.Kind, obj client.Object, refs []stamp.Source, content map[string]*corev1.ConfigMap) (stamp.Stamp, error) {
	cp, ok := obj.DeepCopyObject().(client.Object)
	if !ok || kind.Template(cp) == nil {
		return stamp.Stamp{}, errors.New("no pod template to ask the webhook about")
	}
	prepareDryRun(kind, cp)
	timeout := c.DryRunTimeout
	if timeout <= 0 {
		timeout = DefaultDryRunTimeout
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := c.Client.Create(dctx, cp, client.DryRunAll); err != nil {
		what := strings.ToLower(kind.Kind)
		switch {
		case ctx.Err() == nil && dctx.Err() != nil:
			return stamp.Stamp{}, fmt.Errorf("the hash key can't be read, and the server-side dry-run create of a copy of the %s got no answer within %s (--dry-run-timeout): "+
				"an admission webhook (configstamp's, or another) is slow or hangs", what, timeout)
		case apierrors.IsForbidden(err):
			return stamp.Stamp{}, fmt.Errorf("the hash key can't be read, and asking the webhook needs the right to create %s in namespace %s (a server-side dry-run, nothing stored): %v",
				kind.Resource, obj.GetNamespace(), apierrors.ReasonForError(err))
		default:
			return stamp.Stamp{}, fmt.Errorf("the hash key can't be read, and a server-side dry-run create of a copy of the %s was refused (another admission check, a quota?): %w", what, err)
		}
	}
	ann := kind.Template(cp).Annotations
	st, err := parseStamp(ann[stamp.HashAnnotation], ann[stamp.SourcesAnnotation], refs, content)
	if err != nil {
		return stamp.Stamp{}, fmt.Errorf("the webhook's answer to a dry-run: %w", err)
	}
	if st.Hash == "" && !allIgnored(refs, content) {
		return stamp.Stamp{}, errors.New("the hash key can't be read, and configstamp's webhook did not stamp a dry-run copy of the workload (is configstamp running and answering?)")
	}
	return st, nil
}

// prepareDryRun turns a read workload into a new object to create: a generated name,
// no identity, status or history, and none of configstamp's annotations, so that the
// webhook stamps it from scratch as it would a new workload.
func prepareDryRun(kind *workload.Kind, obj client.Object) {
	name := obj.GetName()
	obj.SetName("")
	obj.SetGenerateName(name[:min(len(name), 30)] + dryRunSuffix) // under 63 characters with the random suffix
	obj.SetResourceVersion("")
	obj.SetUID("")
	obj.SetCreationTimestamp(metav1.Time{})
	obj.SetDeletionTimestamp(nil)
	obj.SetGeneration(0)
	obj.SetManagedFields(nil)
	obj.SetOwnerReferences(nil)
	obj.SetFinalizers(nil)
	ann := obj.GetAnnotations()
	for _, k := range []string{stamp.ObservedAnnotation, stamp.NudgeAnnotation} {
		delete(ann, k)
	}
	obj.SetAnnotations(ann)
	tmpl := kind.Template(obj)
	for _, k := range []string{stamp.HashAnnotation, stamp.SourcesAnnotation, stamp.RestartedAnnotation} {
		delete(tmpl.Annotations, k)
	}
}

// parseStamp reads a stamp from its annotations: per-source digests as far as the
// sources annotation shows them (their first 12 hex characters), and what each source
// would lack from refs and content.
func parseStamp(hash, sources string, refs []stamp.Source, content map[string]*corev1.ConfigMap) (stamp.Stamp, error) {
	if hash == "" {
		return stamp.Stamp{}, nil
	}
	byID := map[string]stamp.Source{}
	for _, r := range refs {
		byID[r.ID()] = r
	}
	var ds []stamp.Digest
	for _, e := range strings.Split(sources, ",") {
		id, v, ok := strings.Cut(e, "=")
		kind, name, ok2 := strings.Cut(id, "/")
		if !ok || !ok2 {
			return stamp.Stamp{}, fmt.Errorf("sources annotation %q: entry %q is not kind/name=digest", sources, e)
		}
		d := stamp.Digest{Kind: kind, Name: name, Missing: v == "missing"}
		if !d.Missing {
			if _, err := hex.Decode(d.Sum[:], []byte(v)); err != nil || len(v) != 12 {
				return stamp.Stamp{}, fmt.Errorf("sources annotation %q: digest %q is not 12 hex characters", sources, v)
			}
		}
		if ref, ok := byID[id]; ok {
			if cm, read := content[id]; read {
				d.Unmet = ref.Unmet(cm)
			}
		}
		ds = append(ds, d)
	}
	return stamp.Stamp{Hash: hash, Sources: ds}, nil
}

// allIgnored reports whether every source was read and is ignored: then no stamp is
// the right answer.
func allIgnored(refs []stamp.Source, content map[string]*corev1.ConfigMap) bool {
	for _, r := range refs {
		cm, read := content[r.ID()]
		if !read || !stamp.Ignored(cm) {
			return false
		}
	}
	return true
}
