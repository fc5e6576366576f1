package webhook

import (
	"context"
	"errors"
	"fmt"
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

// forbidCronJobs answers every CronJob read with Forbidden, as an API server does when
// the webhook role lacks get cronjobs.
type forbidCronJobs struct{ client.Reader }

func (f forbidCronJobs) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if obj.GetObjectKind().GroupVersionKind().Kind == "CronJob" {
		return apierrors.NewForbidden(schema.GroupResource{Group: "batch", Resource: "cronjobs"}, key.Name, errors.New("no"))
	}
	return f.Reader.Get(ctx, key, obj, opts...)
}

// A Job of a skipped CronJob is not stamped; when that CronJob cannot be read (missing,
// forbidden) or is not the Job's owner (another UID, none, or of another namespace), the
// Job is stamped from its own annotations, and admitted.
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
		// An ownerReference has no namespace: a CronJob of that name and UID in another
		// namespace is never read for a Job of "ns".
		{"owner in another namespace", func() *Stamper {
			other := skipped.DeepCopy()
			other.Namespace = "other"
			return stamper(t, cm("cfg", "1"), other)
		}(), "u1", true},
		{"no uid", stamper(t, cm("cfg", "1"), skipped), "", true},
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
