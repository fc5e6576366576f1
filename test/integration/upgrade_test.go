package integration

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/apitime"
	"github.com/configstamp/configstamp/webhook"
)

// TestUpgradeAddingKindsRollsNothing: a version that stamped Deployments only was
// installed (its registration has one kind's entries and no coverage); a StatefulSet
// created after it, never stamped for want of an entry, whose ConfigMap was written after
// it, is taken as installed over when an upgrade adds StatefulSets: recorded, not rolled.
// (Its creation is after the registration's: the registration's age alone would have
// taken it as bypassed, and rolled it.)
func TestUpgradeAddingKindsRollsNothing(t *testing.T) {
	deleteRegistration(t)
	sc, err := scope.New(stamp.InjectLabel, scope.DefaultExcluded)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing listens on port 1: every call fails and is ignored (failurePolicy Ignore).
	old := webhook.Registration(admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1")}, sc, []*workload.Kind{workload.Deployment})
	// Dev mode's own (the upgrade below updates it in place, as a chart upgrade would).
	old.Name = webhook.DevConfigurationName
	old.Labels["app.kubernetes.io/managed-by"] = webhook.DevManagedBy
	if err := k8s.Create(bg, old); err != nil {
		t.Fatal(err)
	}
	apitime.NextSecond() // the API server's times have one-second resolution
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "cfg", map[string]string{"k": "1"}))
	labels := map[string]string{"app": "db"}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, Spec: appsv1.StatefulSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podWithVolumes("cfg")},
	}}
	create(t, sts)
	// As its controller would (this control plane runs none): the generation seen, no
	// revisions yet, so its pods count from its creation.
	sts.Status.ObservedGeneration = sts.Generation
	if err := k8s.Status().Update(bg, sts); err != nil {
		t.Fatal(err)
	}
	apitime.NextSecond()
	setData(t, ns, "cfg", "k", "2")

	env.Start(t, framework.Options{})
	framework.Eventually(t, 30*time.Second, "record on the StatefulSet", func() error {
		var got appsv1.StatefulSet
		if err := k8s.Get(bg, client.ObjectKeyFromObject(sts), &got); err != nil {
			return err
		}
		if _, ok := stamp.ObservedFor(got.Annotations, &got.Spec.Template); !ok {
			return fmt.Errorf("no record yet")
		}
		return nil
	})
	framework.Consistently(t, 3*time.Second, "StatefulSet not rolled", func() error {
		var got appsv1.StatefulSet
		if err := k8s.Get(bg, client.ObjectKeyFromObject(sts), &got); err != nil {
			return err
		}
		if got.Generation != 1 || got.Spec.Template.Annotations[stamp.HashAnnotation] != "" {
			return fmt.Errorf("generation %d, stamp %q", got.Generation, got.Spec.Template.Annotations[stamp.HashAnnotation])
		}
		return nil
	})
	// The registration now says since when the new kinds are covered (Deployments:
	// since its creation).
	framework.Eventually(t, 30*time.Second, "coverage on the registration", func() error {
		var reg admissionregistrationv1.MutatingWebhookConfiguration
		if err := k8s.Get(bg, client.ObjectKey{Name: webhook.DevConfigurationName}, &reg); err != nil {
			return err
		}
		var covered map[string]time.Time
		if err := json.Unmarshal([]byte(reg.Annotations[stamp.CoverageAnnotation]), &covered); err != nil {
			return fmt.Errorf("coverage annotation %q: %v", reg.Annotations[stamp.CoverageAnnotation], err)
		}
		for _, k := range []*workload.Kind{workload.StatefulSet, workload.DaemonSet} {
			if covered[k.Resource].Before(sts.CreationTimestamp.Time) {
				return fmt.Errorf("%s covered since %v, before the StatefulSet was created (%v)", k.Resource, covered[k.Resource], sts.CreationTimestamp)
			}
		}
		return nil
	})
}

// TestUpgradeIncludingNamespaceRollsNothing: configstamp ran with a namespace excluded
// (labelled long before); an upgrade excludes it no longer. Its StatefulSet, never
// stamped, whose ConfigMap was written after StatefulSets were covered and after its
// pods started (while excluded), is taken as installed over at the change of scope:
// recorded, not rolled. (Judged by its namespace's last write, the label's, it would be
// owed that write, and rolled, by an upgrade of configstamp.)
func TestUpgradeIncludingNamespaceRollsNothing(t *testing.T) {
	deleteRegistration(t)
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "cfg", map[string]string{"k": "1"}))
	labels := map[string]string{"app": "db"}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, Spec: appsv1.StatefulSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podWithVolumes("cfg")},
	}}
	create(t, sts)
	// As its controller would (this control plane runs none): its pods count from its
	// creation.
	sts.Status.ObservedGeneration = sts.Generation
	if err := k8s.Status().Update(bg, sts); err != nil {
		t.Fatal(err)
	}
	apitime.NextSecond()
	p := env.Start(t, framework.Options{Args: []string{"--exclude-namespaces", strings.Join(append(slices.Clone(scope.DefaultExcluded), ns), ",")}})
	framework.Eventually(t, 30*time.Second, "coverage of StatefulSets and of the scope", func() error {
		var reg admissionregistrationv1.MutatingWebhookConfiguration
		if err := k8s.Get(bg, client.ObjectKey{Name: webhook.DevConfigurationName}, &reg); err != nil {
			return err
		}
		v := reg.Annotations[stamp.CoverageAnnotation]
		if !strings.Contains(v, `"statefulsets"`) || !strings.Contains(v, `"scope/`) {
			return fmt.Errorf("coverage %q", v)
		}
		return nil
	})
	p.Stop()
	apitime.NextSecond()
	setData(t, ns, "cfg", "k", "2")
	apitime.NextSecond()

	env.Start(t, framework.Options{})
	framework.Eventually(t, 30*time.Second, "record on the StatefulSet", func() error {
		var got appsv1.StatefulSet
		if err := k8s.Get(bg, client.ObjectKeyFromObject(sts), &got); err != nil {
			return err
		}
		if got.Spec.Template.Annotations[stamp.HashAnnotation] != "" {
			return fmt.Errorf("rolled: stamped %q", got.Spec.Template.Annotations[stamp.HashAnnotation])
		}
		if _, ok := stamp.ObservedFor(got.Annotations, &got.Spec.Template); !ok {
			return fmt.Errorf("no record yet")
		}
		return nil
	})
	framework.Consistently(t, 3*time.Second, "StatefulSet not rolled", func() error {
		var got appsv1.StatefulSet
		if err := k8s.Get(bg, client.ObjectKeyFromObject(sts), &got); err != nil {
			return err
		}
		if got.Generation != 1 || got.Spec.Template.Annotations[stamp.HashAnnotation] != "" {
			return fmt.Errorf("generation %d, stamp %q", got.Generation, got.Spec.Template.Annotations[stamp.HashAnnotation])
		}
		return nil
	})
}
