package kinds

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/apitime"
	"github.com/configstamp/configstamp/test/internal/configmaps"
)

// TestPartialRollouts: workloads whose controller replaces pods only when they are
// deleted (StatefulSet and DaemonSet updateStrategy OnDelete) or above a partition (a
// StatefulSet with rollingUpdate.partition at its replicas). A config change stamps the
// template once (one new ControllerRevision, no more: no restart loop), and the record
// says what the pods run: the new config for the template, and the old one for the pods
// still on the older template (stamp.Observed.Behind). Once the pods are replaced (deleted,
// or the partition lowered to 0), the record drops the old config.
func TestPartialRollouts(t *testing.T) {
	env.Start(t, options)
	for _, tc := range []struct {
		name string
		new  func(ns string) client.Object
		// replace makes the controller replace the remaining pods.
		replace func(t *testing.T, obj client.Object)
	}{
		{"StatefulSet OnDelete", func(ns string) client.Object {
			s := newStatefulSet(ns, "cfg", "cfg").(*appsv1.StatefulSet)
			s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
			return s
		}, deletePods},
		{"StatefulSet partition", func(ns string) client.Object {
			s := newStatefulSet(ns, "cfg", "cfg").(*appsv1.StatefulSet)
			s.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To[int32](3)}
			return s
		}, func(t *testing.T, obj client.Object) {
			patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"updateStrategy":{"rollingUpdate":{"partition":0}}}}`))
			if err := env.Client.Patch(bg, obj, patch); err != nil {
				t.Fatal(err)
			}
		}},
		{"DaemonSet OnDelete", func(ns string) client.Object {
			d := newDaemonSet(ns, "cfg", "cfg").(*appsv1.DaemonSet)
			d.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
			return d
		}, deletePods},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := env.NewNamespace(t, true)
			createConfigMap(t, ns, "cfg", map[string]string{"k": "1"}, nil)
			apitime.NextSecond()
			obj := tc.new(ns)
			create(t, obj)
			first := docHash(t, ns, "cfg")
			stampedWith(t, obj, first)
			env.ExpectRevisions(t, obj, 1, 0)

			configmaps.SetData(t, env.Client, ns, "cfg", "k", "2")
			second := docHash(t, ns, "cfg")
			kind := kindOf(t, obj)
			framework.Eventually(t, time.Minute, "template stamped, record behind", func() error {
				return partialState(t, kind, obj, second, first)
			})
			// Stamped once: no further revision, and the record stays as it is while the
			// older pods stay.
			framework.Consistently(t, settle, "one new revision, record behind", func() error {
				if got := env.ControllerRevisions(t, obj); len(got) != 2 {
					return fmt.Errorf("%d ControllerRevisions, want 2", len(got))
				}
				return partialState(t, kind, obj, second, first)
			})

			tc.replace(t, obj)
			framework.Eventually(t, 2*time.Minute, "pods replaced, record without behind", func() error {
				return partialState(t, kind, obj, second, "")
			})
			if got := env.ControllerRevisions(t, obj); len(got) != 2 {
				t.Errorf("%d ControllerRevisions, want 2", len(got))
			}
		})
	}
}

// partialState checks that obj is stamped with hash, its record says its template's
// pods run hash and older pods behind ("": none, and its controller shows none left),
// and, with behind set, that its controller shows every pod still on the older template.
func partialState(t *testing.T, kind *workload.Kind, obj client.Object, hash, behind string) error {
	fresh := reread(t, env.Client, obj)
	tmpl := template(t, fresh)
	if got := tmpl.Annotations[stamp.HashAnnotation]; got != hash {
		return fmt.Errorf("template hash %q, want %q", got, hash)
	}
	rec, ok := stamp.ObservedFor(fresh.GetAnnotations(), tmpl)
	if !ok || rec.Hash != hash || rec.Behind != behind {
		return fmt.Errorf("record %q, want %s behind %q", fresh.GetAnnotations()[stamp.ObservedAnnotation], hash, behind)
	}
	n, total, partial := kind.Behind(fresh)
	switch {
	case behind == "" && n != 0:
		return fmt.Errorf("%d of %d pods on an older template", n, total)
	case behind != "" && (n == 0 || n != total || !partial):
		return fmt.Errorf("%d of %d pods on an older template (partial: %v), want all", n, total, partial)
	}
	return nil
}

// kindOf is the workload kind of obj.
func kindOf(t *testing.T, obj client.Object) *workload.Kind {
	switch obj.(type) {
	case *appsv1.StatefulSet:
		return workload.StatefulSet
	case *appsv1.DaemonSet:
		return workload.DaemonSet
	}
	t.Fatalf("no kind for %T", obj)
	return nil
}

// deletePods deletes the workload's pods (selected by its app label), as an operator of
// an OnDelete workload does to take a new template.
func deletePods(t *testing.T, obj client.Object) {
	t.Helper()
	var pods corev1.PodList
	if err := env.Client.List(bg, &pods, client.InNamespace(obj.GetNamespace()), client.MatchingLabels{"app": obj.GetName()}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) == 0 {
		t.Fatal("no pods to delete")
	}
	for i := range pods.Items {
		if err := client.IgnoreNotFound(env.Client.Delete(bg, &pods.Items[i])); err != nil {
			t.Fatal(err)
		}
	}
}
