package kinds

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/configmaps"
)

// neverSchedule is a CronJob schedule that does not fire while a test runs (midnight on
// 1 January): every Job in these tests is one the test creates.
const neverSchedule = "0 0 1 1 *"

// newCronJob is a CronJob consuming cm whose schedule never fires in a test.
func newCronJob(ns, name, cm string, suspend bool) *batchv1.CronJob {
	tmpl := podTemplate(name, cm)
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	return &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: batchv1.CronJobSpec{Schedule: neverSchedule, Suspend: ptr.To(suspend),
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: tmpl}}},
	}
}

// jobFrom is the Job `kubectl create job NAME --from=cronjob/CJ` makes of cj: its
// jobTemplate's labels, annotations and spec, the annotation
// cronjob.kubernetes.io/instantiate=manual, and cj as its controller.
func jobFrom(cj *batchv1.CronJob, name string) *batchv1.Job {
	ann := map[string]string{"cronjob.kubernetes.io/instantiate": "manual"}
	maps.Copy(ann, cj.Spec.JobTemplate.Annotations)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: cj.Namespace, Name: name, Labels: cj.Spec.JobTemplate.Labels, Annotations: ann,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cj, batchv1.SchemeGroupVersion.WithKind("CronJob"))}},
		Spec: *cj.Spec.JobTemplate.Spec.DeepCopy(),
	}
}

// cronJob reads the CronJob again.
func cronJob(t testing.TB, cj *batchv1.CronJob) *batchv1.CronJob {
	t.Helper()
	return reread(t, env.Client, cj).(*batchv1.CronJob)
}

// cronJobStamped waits until the CronJob's template carries hash, with its record, and
// returns it.
func cronJobStamped(t testing.TB, cj *batchv1.CronJob, hash string) *batchv1.CronJob {
	t.Helper()
	var fresh *batchv1.CronJob
	framework.Eventually(t, time.Minute, "CronJob "+cj.Name+" stamped "+hash, func() error {
		fresh = cronJob(t, cj)
		tmpl := &fresh.Spec.JobTemplate.Spec.Template
		if got := tmpl.Annotations[stamp.HashAnnotation]; got != hash {
			return fmt.Errorf("template hash %q", got)
		}
		if rec, ok := stamp.ObservedFor(fresh.Annotations, tmpl); !ok || rec.Hash != hash {
			return fmt.Errorf("record %q", fresh.Annotations[stamp.ObservedAnnotation])
		}
		return nil
	})
	return fresh
}

// generationHolds asserts that the CronJob's spec was written gen times (its
// generation) for the settle window: configstamp restamps nothing more.
func generationHolds(t testing.TB, cj *batchv1.CronJob, gen int64) {
	t.Helper()
	framework.Consistently(t, settle, "CronJob "+cj.Name+" at generation "+fmt.Sprint(gen), func() error {
		if g := cronJob(t, cj).Generation; g != gen {
			return fmt.Errorf("generation %d", g)
		}
		return nil
	})
}

// jobsIn lists the Jobs of namespace ns.
func jobsIn(t testing.TB, ns string) []batchv1.Job {
	t.Helper()
	var jobs batchv1.JobList
	if err := env.Client.List(bg, &jobs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return jobs.Items
}

// jobPodsStamped waits until the Job's controller has created its pod and asserts that
// it carries hash.
func jobPodsStamped(t testing.TB, job *batchv1.Job, hash string) {
	t.Helper()
	framework.Eventually(t, 2*time.Minute, "a pod of Job "+job.Name, func() error {
		var pods corev1.PodList
		if err := env.Client.List(bg, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return fmt.Errorf("no pod yet")
		}
		for _, p := range pods.Items {
			if got := p.Annotations[stamp.HashAnnotation]; got != hash {
				t.Fatalf("pod %s of Job %s runs config hash %q, want %q", p.Name, job.Name, got, hash)
			}
		}
		return nil
	})
}

// jobUnwritten asserts that nothing of configstamp's changed on the Job since it was
// read as was: its annotations and its template's are the same, its spec never written.
func jobUnwritten(t testing.TB, was *batchv1.Job) {
	t.Helper()
	now := reread(t, env.Client, was).(*batchv1.Job)
	if !maps.Equal(now.Annotations, was.Annotations) || !maps.Equal(now.Spec.Template.Annotations, was.Spec.Template.Annotations) || now.Generation != was.Generation {
		t.Errorf("Job %s written after its creation: annotations %v, template annotations %v, generation %d; were %v, %v, %d", was.Name,
			now.Annotations, now.Spec.Template.Annotations, now.Generation, was.Annotations, was.Spec.Template.Annotations, was.Generation)
	}
}

// cronJobScenario runs the CronJob's exactly-once rule on cj, stamped with the config of
// its ConfigMap (named in its first volume) at generation gen: a label-only edit
// restamps nothing; a data change restamps it once and starts no Job; a Job copied from
// it as kubectl create job --from does is stamped alike and runs pods with the new
// stamp, and is never written after, whatever the config does; nor is old, a Job made
// before configstamp ran (nil: none).
func cronJobScenario(t *testing.T, cj *batchv1.CronJob, gen int64, old *batchv1.Job) {
	ns, cm := cj.Namespace, cj.Spec.JobTemplate.Spec.Template.Spec.Volumes[0].ConfigMap.Name
	jobsBefore := len(jobsIn(t, ns))
	relabel(t, ns, cm)
	generationHolds(t, cj, gen)

	configmaps.SetData(t, env.Client, ns, cm, "k", "2")
	want := docHash(t, ns, cm)
	fresh := cronJobStamped(t, cj, want)
	if fresh.Generation != gen+1 {
		t.Fatalf("CronJob %s at generation %d after one change, want %d", cj.Name, fresh.Generation, gen+1)
	}
	generationHolds(t, cj, gen+1)
	if n := len(jobsIn(t, ns)); n != jobsBefore {
		t.Fatalf("%d Jobs after the change, want %d: a config change starts no Job", n, jobsBefore)
	}

	job := jobFrom(fresh, cj.Name+"-manual")
	create(t, job)
	if got := job.Spec.Template.Annotations[stamp.HashAnnotation]; got != want {
		t.Fatalf("Job %s created with config hash %q, want the CronJob's %q", job.Name, got, want)
	}
	jobPodsStamped(t, job, want)
	created := reread(t, env.Client, job).(*batchv1.Job)

	// Another change restamps the CronJob, never its Jobs.
	configmaps.SetData(t, env.Client, ns, cm, "k", "3")
	cronJobStamped(t, cj, docHash(t, ns, cm))
	generationHolds(t, cj, gen+2)
	jobUnwritten(t, created)
	if old != nil {
		jobUnwritten(t, old)
		if h := old.Spec.Template.Annotations[stamp.HashAnnotation]; h != "" {
			t.Errorf("Job %s made before configstamp ran is stamped %s", old.Name, h)
		}
	}
	checkAfterRestart(func(t *testing.T) {
		// Read once: the restart's checks are long over by now.
		if g := cronJob(t, cj).Generation; g != gen+2 {
			t.Errorf("CronJob %s at generation %d after the restart, want %d", cj.Name, g, gen+2)
		}
		jobUnwritten(t, created)
	})
}

// installedCronJob creates, before configstamp first runs, a suspended CronJob consuming
// the ConfigMap cronjob in ns, and a Job copied from it.
func installedCronJob(t *testing.T, ns string) (*batchv1.CronJob, *batchv1.Job) {
	createConfigMap(t, ns, "cronjob", map[string]string{"k": "1"}, nil)
	cj := newCronJob(ns, "cronjob", "cronjob", true)
	create(t, cj)
	job := jobFrom(cj, "cronjob-before")
	create(t, job)
	jobPodsStamped(t, job, "")
	return cj, reread(t, env.Client, job).(*batchv1.Job)
}

// testCronJobInstalledOver: a suspended CronJob configstamp was installed over is
// stamped once it runs (stamping a CronJob starts nothing; suspended or not, its next
// Job gets the stamp), then follows the rule; the Job made before stays untouched.
func testCronJobInstalledOver(t *testing.T, cj *batchv1.CronJob, old *batchv1.Job) {
	fresh := cronJobStamped(t, cj, docHash(t, cj.Namespace, "cronjob"))
	if fresh.Generation != 2 || !ptr.Deref(fresh.Spec.Suspend, false) {
		t.Fatalf("CronJob at generation %d (suspend %v), want 2: stamped once, still suspended", fresh.Generation, fresh.Spec.Suspend)
	}
	generationHolds(t, cj, 2)
	cronJobScenario(t, fresh, 2, old)
}

// testCronJobCreatedAfter: a CronJob created while configstamp runs is stamped in the
// response to its create, then follows the rule.
func testCronJobCreatedAfter(t *testing.T) {
	ns := env.NewNamespace(t, true)
	createConfigMap(t, ns, "cfg", map[string]string{"k": "1"}, nil)
	cj := newCronJob(ns, "cfg", "cfg", false)
	create(t, cj)
	if got, want := cj.Spec.JobTemplate.Spec.Template.Annotations[stamp.HashAnnotation], docHash(t, ns, "cfg"); got != want {
		t.Fatalf("CronJob created with config hash %q, want %q", got, want)
	}
	generationHolds(t, cj, 1)
	cronJobScenario(t, cj, 1, nil)
}

// testCronJobOwnerAnnotations: a Job takes its CronJob's configstamp.io/extra-sources and
// configstamp.io/skip (read live at its create: the cronjob controller and kubectl copy
// only jobTemplate.metadata), so a Job of a CronJob with extra sources is stamped as
// its CronJob is, and a Job of a skipped CronJob is not stamped. An ownerReference whose
// UID is not the CronJob's takes nothing.
func testCronJobOwnerAnnotations(t *testing.T) {
	ns := env.NewNamespace(t, true)
	createConfigMap(t, ns, "cfg", map[string]string{"k": "1"}, nil)
	createConfigMap(t, ns, "extra", map[string]string{"e": "1"}, nil)

	cj := newCronJob(ns, "extra", "cfg", false)
	cj.Annotations = map[string]string{stamp.ExtraSourcesAnnotation: "configmap/extra"}
	create(t, cj)
	want := docHash(t, ns, "cfg", "extra")
	if got := cj.Spec.JobTemplate.Spec.Template.Annotations[stamp.HashAnnotation]; got != want {
		t.Fatalf("CronJob created with config hash %q, want %q (its extra source included)", got, want)
	}
	job := jobFrom(cj, "extra-manual")
	create(t, job)
	if got, srcs := job.Spec.Template.Annotations[stamp.HashAnnotation], job.Spec.Template.Annotations[stamp.SourcesAnnotation]; got != want || !strings.Contains(srcs, "extra") {
		t.Errorf("Job of a CronJob with extra sources created with config hash %q (sources %q), want the CronJob's %q, with configmap extra", got, srcs, want)
	}

	skipped := newCronJob(ns, "skipped", "cfg", false)
	skipped.Annotations = map[string]string{stamp.SkipAnnotation: "true"}
	create(t, skipped)
	if h := skipped.Spec.JobTemplate.Spec.Template.Annotations[stamp.HashAnnotation]; h != "" {
		t.Fatalf("skipped CronJob created with config hash %q", h)
	}
	job = jobFrom(skipped, "skipped-manual")
	create(t, job)
	if h := job.Spec.Template.Annotations[stamp.HashAnnotation]; h != "" {
		t.Errorf("Job of a skipped CronJob created with config hash %q, want none", h)
	}

	forged := jobFrom(skipped, "forged")
	forged.OwnerReferences[0].UID = "not-the-cronjobs"
	create(t, forged)
	if got, want := forged.Spec.Template.Annotations[stamp.HashAnnotation], docHash(t, ns, "cfg"); got != want {
		t.Errorf("Job whose ownerReference has another UID created with config hash %q, want its own %q", got, want)
	}
}
