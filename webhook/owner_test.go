package webhook

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// TestWithOwner: a Job takes its CronJob's extra sources and skip where it has none of
// its own, and nothing else of it.
func TestWithOwner(t *testing.T) {
	extra, skip := stamp.ExtraSourcesAnnotation, stamp.SkipAnnotation
	for _, c := range []struct {
		name             string
		own, owner, want map[string]string
	}{
		{"no owner", map[string]string{"a": "1"}, nil, map[string]string{"a": "1"}},
		{"none of its own", nil, map[string]string{extra: "configmap/x", skip: "true", "other": "no"}, map[string]string{extra: "configmap/x", skip: "true"}},
		{"its own win", map[string]string{extra: "configmap/mine", skip: "false"}, map[string]string{extra: "configmap/x", skip: "true"}, map[string]string{extra: "configmap/mine", skip: "false"}},
		{"an empty own value wins", map[string]string{extra: ""}, map[string]string{extra: "configmap/x"}, map[string]string{extra: ""}},
		{"one of each", map[string]string{skip: "false", "a": "1"}, map[string]string{extra: "configmap/x", skip: "true"}, map[string]string{skip: "false", "a": "1", extra: "configmap/x"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := maps.Clone(c.own)
			got := withOwner(c.own, c.owner)
			if !maps.Equal(got, c.want) {
				t.Errorf("withOwner = %v, want %v", got, c.want)
			}
			if !maps.Equal(c.own, before) {
				t.Errorf("withOwner changed the object's annotations: %v, were %v", c.own, before)
			}
		})
	}
}

// forbidCronJobs answers every CronJob read with Forbidden, as an API server does when
// the webhook role lacks get cronjobs.
type forbidCronJobs struct{ client.Reader }

func (f forbidCronJobs) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*batchv1.CronJob); ok {
		return apierrors.NewForbidden(schema.GroupResource{Group: "batch", Resource: "cronjobs"}, key.Name, errors.New("no"))
	}
	return f.Reader.Get(ctx, key, obj, opts...)
}

// A Job of a skipped CronJob is not stamped; when that CronJob cannot be read (missing,
// forbidden) or is not the Job's owner (another UID), the Job is stamped from its own
// annotations, and admitted.
func TestHandleJobOwner(t *testing.T) {
	skipped := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "nightly", UID: "u1",
		Annotations: map[string]string{stamp.SkipAnnotation: "true"}}}
	job := func(uid types.UID) *batchv1.Job {
		ref := metav1.NewControllerRef(skipped, batchv1.SchemeGroupVersion.WithKind("CronJob"))
		ref.UID = uid
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", OwnerReferences: []metav1.OwnerReference{*ref}},
			Spec: batchv1.JobSpec{Template: cmTemplate()}}
	}
	for _, c := range []struct {
		name    string
		s       *Stamper
		uid     types.UID
		stamped bool
	}{
		{"owner skipped", stamper(t, cm("cfg", "1"), skipped), "u1", false},
		{"owner missing", stamper(t, cm("cfg", "1")), "u1", true},
		{"owner forbidden", func() *Stamper {
			s := stamper(t, cm("cfg", "1"), skipped)
			s.Reader = forbidCronJobs{s.Reader}
			return s
		}(), "u1", true},
		{"another uid", stamper(t, cm("cfg", "1"), skipped), "u2", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := c.s.Handle(context.Background(), review(t, workload.Job, admissionv1.Create, job(c.uid), nil))
			if !resp.Allowed {
				t.Fatalf("not admitted: %+v", resp)
			}
			stamped := false
			for _, p := range resp.Patches {
				if strings.HasPrefix(p.Path, workload.Job.TemplatePath()) && strings.Contains(fmt.Sprint(p.Value), expected(t, "1").Hash) {
					stamped = true
				}
			}
			if stamped != c.stamped {
				t.Errorf("stamped %v, want %v: %+v", stamped, c.stamped, resp.Patches)
			}
		})
	}
}
