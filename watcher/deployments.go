package watcher

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/stamp"
)

// Event reasons recorded on Deployments.
const (
	ReasonConfigChanged = "ConfigChanged"
	ReasonStampBypassed = "StampBypassed"
)

// nudgePatch is the watcher's "empty" update: it only sets the nudge marker, which the
// webhook strips again while it recomputes the stamp. If the stamp is unchanged the API
// server stores nothing; if the webhook is down, the marker lands in the Deployment's
// metadata, which rolls nothing.
var nudgePatch = client.RawPatch(types.MergePatchType,
	[]byte(`{"metadata":{"annotations":{"`+stamp.NudgeAnnotation+`":"true"}}}`))

// deploymentReconciler checks one Deployment's stamp against its config and, when they
// differ, nudges it through the webhook, then verifies the result.
type deploymentReconciler struct {
	client      client.Client // cached reads, direct writes
	live        client.Reader // live ConfigMap reads
	recorder    recorder.EventRecorder
	readTimeout time.Duration
	adopt       *keySet
	// namespaceLabel opts a namespace in (value "enabled").
	namespaceLabel string
	cache          *configread.DigestCache
}

// events re-checks stamped Deployments from the initial list (config may have changed
// while configstamp was down) and checks new unstamped ones after the debounce (a CREATE
// that bypassed the webhook gets its stamp). Updates need no check: they go through the
// webhook, and ConfigMap changes arrive through the ConfigMap controller.
func (r *deploymentReconciler) events(quiet time.Duration) handler.Funcs {
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			dep, ok := e.Object.(*appsv1.Deployment)
			if !ok {
				return
			}
			req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(dep)}
			stamped := dep.Spec.Template.Annotations[stamp.HashAnnotation] != ""
			switch {
			case e.IsInInitialList && stamped:
				// Its config may have changed while configstamp was down.
				q.Add(req)
			case !e.IsInInitialList && !stamped && len(stamp.References(&dep.Spec.Template.Spec)) > 0:
				// Created while the webhook was unreachable. A stamped new Deployment
				// needs no check: ConfigMap events cover later changes, debounced.
				r.adopt.add(req.NamespacedName)
				q.AddAfter(req, quiet)
			}
		},
	}
}

// Reconcile compares the stored stamp with the one the current config gives and nudges
// the Deployment when they differ. An unstamped Deployment is only adopted when its
// config really changed (lazy adoption: installing configstamp rolls nothing).
func (r *deploymentReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	adopt := r.adopt.take(req.NamespacedName)
	err := r.check(ctx, req, adopt)
	if err != nil && adopt {
		r.adopt.add(req.NamespacedName) // keep the intent for the retry
	}
	return reconcile.Result{}, err
}

func (r *deploymentReconciler) check(ctx context.Context, req reconcile.Request, adopt bool) error {
	log := logf.FromContext(ctx)
	var dep appsv1.Deployment
	if err := r.client.Get(ctx, req.NamespacedName, &dep); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !dep.DeletionTimestamp.IsZero() || stamp.IsTrue(dep.Annotations[stamp.SkipAnnotation]) {
		return nil
	}
	if ok, err := optedIn(ctx, r.client, dep.Namespace, r.namespaceLabel); err != nil || !ok {
		return err
	}
	stored := dep.Spec.Template.Annotations[stamp.HashAnnotation]
	if stored == "" && !adopt {
		return nil
	}
	want, err := r.expected(ctx, &dep)
	if err != nil {
		checks.WithLabelValues("error").Inc()
		return err
	}
	if want.Hash == stored && want.SourcesAnnotation() == dep.Spec.Template.Annotations[stamp.SourcesAnnotation] {
		log.V(1).Info("Stamp up to date", "hash", stored)
		checks.WithLabelValues("current").Inc()
		return nil
	}

	before := dep.Spec.Template.Annotations[stamp.SourcesAnnotation]
	if err := r.client.Patch(ctx, &dep, nudgePatch); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		checks.WithLabelValues("error").Inc()
		return fmt.Errorf("nudge deployment %s: %w", req, err)
	}
	nudges.Inc()
	got := dep.Spec.Template.Annotations[stamp.HashAnnotation]
	if got != want.Hash {
		// The config may have moved on since we read it: compare with a fresh read
		// before calling it a bypass.
		if again, err := r.expected(ctx, &dep); err == nil && again.Hash == got {
			checks.WithLabelValues("nudged").Inc()
			return nil
		}
		bypasses.Inc()
		checks.WithLabelValues("bypassed").Inc()
		r.recorder.Eventf(&dep, nil, corev1.EventTypeWarning, ReasonStampBypassed, "Verify",
			"Stored config hash %q differs from the expected %q after a nudge: the configstamp webhook was not called (failurePolicy Ignore); retrying",
			short(got), short(want.Hash))
		log.Info("Detected a stamp that bypassed the webhook; retrying", "storedHash", got, "expectedHash", want.Hash)
		return fmt.Errorf("deployment %s: stamp %q, want %q: webhook bypassed", req, short(got), short(want.Hash))
	}
	checks.WithLabelValues("nudged").Inc()
	changed := changedSources(before, dep.Spec.Template.Annotations[stamp.SourcesAnnotation])
	r.recorder.Eventf(&dep, nil, corev1.EventTypeNormal, ReasonConfigChanged, "Nudge",
		"Config changed (%s): config hash %s -> %s", strings.Join(changed, ", "), short(stored), short(got))
	log.Info("Nudged Deployment after a config change", "oldHash", stored, "newHash", got, "changed", changed)
	return nil
}

func (r *deploymentReconciler) expected(ctx context.Context, dep *appsv1.Deployment) (stamp.Stamp, error) {
	st, err := configread.Stamp(ctx, r.live, r.cache, dep.Namespace, &dep.Spec.Template.Spec, r.readTimeout)
	if err != nil {
		return stamp.Stamp{}, fmt.Errorf("compute stamp of deployment %s/%s: %w", dep.Namespace, dep.Name, err)
	}
	return st, nil
}

// changedSources lists the sources whose digest differs between two sources annotations.
func changedSources(before, after string) []string {
	parse := func(s string) map[string]string {
		m := map[string]string{}
		for _, e := range strings.Split(s, ",") {
			if k, v, ok := strings.Cut(e, "="); ok {
				m[k] = v
			}
		}
		return m
	}
	b, a := parse(before), parse(after)
	var out []string
	for _, e := range strings.Split(after, ",") {
		k, _, _ := strings.Cut(e, "=")
		if k != "" && b[k] != a[k] {
			out = append(out, k)
		}
	}
	for _, e := range strings.Split(before, ",") {
		k, _, _ := strings.Cut(e, "=")
		if _, still := a[k]; k != "" && !still {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		out = []string{"first stamp"}
	}
	return out
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	if h == "" {
		return "none"
	}
	return h
}
