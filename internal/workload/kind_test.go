package workload

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/configstamp/configstamp/internal/argo"
	"github.com/configstamp/configstamp/stamp"
)

func TestNames(t *testing.T) {
	for k, want := range map[*Kind][3]string{
		Deployment:  {"/mutate-apps-v1-deployment", "deployments.configstamp.io", "deployments.by-label.configstamp.io"},
		StatefulSet: {"/mutate-apps-v1-statefulset", "statefulsets.configstamp.io", "statefulsets.by-label.configstamp.io"},
		DaemonSet:   {"/mutate-apps-v1-daemonset", "daemonsets.configstamp.io", "daemonsets.by-label.configstamp.io"},
		Rollout:     {"/mutate-argoproj-io-v1alpha1-rollout", "rollouts.configstamp.io", "rollouts.by-label.configstamp.io"},
		CronJob:     {"/mutate-batch-v1-cronjob", "cronjobs.configstamp.io", "cronjobs.by-label.configstamp.io"},
		Job:         {"/mutate-batch-v1-job", "jobs.configstamp.io", "jobs.by-label.configstamp.io"},
	} {
		if got := [3]string{k.Path(), k.EntryName(), k.LabelEntryName()}; got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	if Find(Builtin(), "apps", "StatefulSet") != StatefulSet || Find(Builtin(), "argoproj.io", "Rollout") != nil {
		t.Error("Find")
	}
}

func at(s int) metav1.Time { return metav1.NewTime(time.Date(2026, 1, 1, 0, 0, s, 0, time.UTC)) }

func owned(obj client.Object) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "X", Name: obj.GetName(), UID: obj.GetUID(), Controller: ptr.To(true)}}
}

func TestPodsSinceReplicaSets(t *testing.T) {
	labels := map[string]string{"app": "a"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "d", CreationTimestamp: at(1)},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	d.Spec.Template.Labels = labels
	d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "c", Image: "v2"}}
	rs := func(name, image string, created int, owner client.Object) *appsv1.ReplicaSet {
		r := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: labels, CreationTimestamp: at(created), OwnerReferences: owned(owner)}}
		r.Spec.Template = *d.Spec.Template.DeepCopy()
		r.Spec.Template.Labels = map[string]string{"app": "a", appsv1.DefaultDeploymentUniqueLabelKey: name}
		r.Spec.Template.Spec.Containers[0].Image = image
		return r
	}
	other := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "other"}}
	check := func(objs []client.Object, wantOK bool, want int) {
		t.Helper()
		since, ok, err := Deployment.PodsSince(context.Background(), fakeClient(objs...), d)
		if err != nil || ok != wantOK || (ok && !since.Equal(at(want).Time)) {
			t.Fatalf("since %v ok %v err %v; want ok %v at %d", since, ok, err, wantOK, want)
		}
	}
	check(nil, true, 1)                                                                   // no ReplicaSets: its creation
	check([]client.Object{rs("old", "v1", 2, d)}, false, 0)                               // the current template's is still to come
	check([]client.Object{rs("old", "v1", 2, d), rs("new", "v2", 5, d)}, true, 5)         // the current template's
	check([]client.Object{rs("old", "v1", 2, d), rs("theirs", "v2", 7, other)}, false, 0) // someone else's does not count
}

func TestPodsSinceControllerRevisions(t *testing.T) {
	labels := map[string]string{"app": "s"}
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", UID: "s", Generation: 2, CreationTimestamp: at(1)},
		Spec: appsv1.StatefulSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	// The fake client keeps no managed-fields times: the revisions' creation stands in
	// for their last write (LastWrite takes the later of the two).
	cr := func(name string, revision int64, written int) *appsv1.ControllerRevision {
		return &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: labels, CreationTimestamp: at(written),
			OwnerReferences: owned(s)}, Revision: revision}
	}
	c := fakeClient(cr("r1", 1, 2), cr("r3", 3, 9), cr("r2", 2, 5))
	if _, ok, err := StatefulSet.PodsSince(context.Background(), c, s); ok || err != nil {
		t.Fatalf("generation not observed yet: ok %v err %v", ok, err)
	}
	s.Status.ObservedGeneration = 2
	since, ok, err := StatefulSet.PodsSince(context.Background(), c, s)
	if err != nil || !ok || !since.Equal(at(9).Time) {
		t.Fatalf("since %v ok %v err %v, want the newest revision's last write", since, ok, err)
	}
	if since, ok, _ := StatefulSet.PodsSince(context.Background(), fakeClient(), s); !ok || !since.Equal(at(1).Time) {
		t.Fatalf("no revisions: %v %v, want its creation", since, ok)
	}
}

func fakeClient(objs ...client.Object) client.Client {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
}

// A Rollout's current ReplicaSet is the one of status.currentPodHash (its template
// carries API defaults and canary labels the Rollout's does not), once Argo has seen the
// current generation.
func TestPodsSinceRollout(t *testing.T) {
	labels := map[string]string{"app": "r"}
	r := &argo.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", UID: "r", Generation: 3, CreationTimestamp: at(1)},
		Spec: argo.RolloutSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	r.Spec.Template.Labels = labels
	r.Spec.Template.Spec.Containers = []corev1.Container{{Name: "c", Image: "v2"}}
	rs := func(hash string, created int) *appsv1.ReplicaSet {
		x := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r-" + hash, CreationTimestamp: at(created),
			Labels: map[string]string{"app": "r", "rollouts-pod-template-hash": hash}, OwnerReferences: owned(r)}}
		x.Spec.Template = *r.Spec.Template.DeepCopy()
		x.Spec.Template.Labels = map[string]string{"app": "r", "rollouts-pod-template-hash": hash, "role": "canary"}
		x.Spec.Template.Spec.Containers[0].TerminationMessagePath = corev1.TerminationMessagePathDefault // an API default
		x.Spec.Template.Spec.DNSPolicy = corev1.DNSClusterFirst
		return x
	}
	c := fakeClient(rs("aaa", 2), rs("bbb", 6))
	check := func(wantOK bool, want int) {
		t.Helper()
		since, ok, err := Rollout.PodsSince(context.Background(), c, r)
		if err != nil || ok != wantOK || (ok && !since.Equal(at(want).Time)) {
			t.Fatalf("since %v ok %v err %v; want ok %v at %d", since, ok, err, wantOK, want)
		}
	}
	r.Status = argo.RolloutStatus{ObservedGeneration: "2", CurrentPodHash: "bbb"}
	check(false, 0) // generation 3 not seen yet
	r.Status.ObservedGeneration = "3"
	check(true, 6)
	r.Status.CurrentPodHash = "ccc"
	check(false, 0) // its ReplicaSet is still to come
	if since, ok, _ := Rollout.PodsSince(context.Background(), fakeClient(), r); !ok || !since.Equal(at(1).Time) {
		t.Fatalf("no ReplicaSets (no Argo controller): %v %v, want its creation", since, ok)
	}
}

// TemplatePath names where Template is in the object's JSON, for every kind.
func TestTemplatePath(t *testing.T) {
	for _, k := range All() {
		obj := k.New()
		k.Template(obj).Annotations = map[string]string{"x": "y"}
		b, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		var node any
		if err := json.Unmarshal(b, &node); err != nil {
			t.Fatal(err)
		}
		for _, tok := range append(strings.Split(k.TemplatePath()[1:], "/"), "metadata", "annotations", "x") {
			m, ok := node.(map[string]any)
			if !ok {
				t.Fatalf("%s: %s does not lead to the template in %s", k, k.TemplatePath(), b)
			}
			node = m[tok]
		}
		if node != "y" {
			t.Errorf("%s: %s does not lead to the template in %s", k, k.TemplatePath(), b)
		}
	}
}

// Names tells each kind from every other: no name a user may type names two kinds.
func TestNamesUnique(t *testing.T) {
	seen := map[string]*Kind{}
	for _, k := range All() {
		for _, n := range k.Names() {
			if other, ok := seen[n]; ok {
				t.Errorf("%q names both %s and %s", n, other, k)
			}
			seen[n] = k
		}
	}
	if len(seen) != 17 {
		t.Errorf("%d names, want 17 (kind, resource and one short name for each of 5 kinds, kind and resource of Job): %v", len(seen), seen)
	}
}

// A CronJob runs no pods of its own: its template's are all still to come (its next
// Jobs). A Job's template cannot change: its pods run it since it started. Neither
// lists anything.
func TestPodsSinceBatch(t *testing.T) {
	cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "c", CreationTimestamp: at(1)}}
	if since, ok, err := CronJob.PodsSince(context.Background(), nil, cj); err != nil || ok || !since.IsZero() {
		t.Errorf("CronJob: %v %v %v, want pods still to come", since, ok, err)
	}
	// A Job created suspended (Kueue's are) starts no pod until resumed: not at its
	// creation, and not yet while it is suspended.
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "j", UID: "j", CreationTimestamp: at(3)}, Spec: batchv1.JobSpec{Suspend: ptr.To(true)}}
	if since, ok, err := Job.PodsSince(context.Background(), nil, j); err != nil || ok || !since.IsZero() {
		t.Errorf("suspended Job: %v %v %v, want pods still to come", since, ok, err)
	}
	started := at(9)
	j.Spec.Suspend, j.Status.StartTime = ptr.To(false), &started
	if since, ok, err := Job.PodsSince(context.Background(), nil, j); err != nil || !ok || !since.Equal(at(9).Time) {
		t.Errorf("Job: %v %v %v, want its start", since, ok, err)
	}
	if !CronJob.NoPods() || CronJob.CreateOnly() || !Job.CreateOnly() || Job.NoPods() || Deployment.NoPods() || Deployment.CreateOnly() {
		t.Error("NoPods, CreateOnly")
	}
	if w := Watched(Builtin()); len(w) != len(Builtin())-1 || Find(w, "batch", "Job") != nil || Find(w, "batch", "CronJob") != CronJob {
		t.Errorf("Watched: %v", w)
	}
}

func TestBehind(t *testing.T) {
	onDelete := appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	partition := func(p int32) appsv1.StatefulSetUpdateStrategy {
		return appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
			RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: &p}}
	}
	sts := func(u appsv1.StatefulSetUpdateStrategy, gen, observed int64, replicas, updated int32) client.Object {
		return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: gen}, Spec: appsv1.StatefulSetSpec{UpdateStrategy: u},
			Status: appsv1.StatefulSetStatus{ObservedGeneration: observed, Replicas: replicas, UpdatedReplicas: updated}}
	}
	ds := func(u appsv1.DaemonSetUpdateStrategyType, desired, updated int32) client.Object {
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Spec: appsv1.DaemonSetSpec{UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: u}},
			Status: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: desired, UpdatedNumberScheduled: updated}}
	}
	for _, tc := range []struct {
		name          string
		kind          *Kind
		obj           client.Object
		behind, total int32
		partial       bool
	}{
		{"StatefulSet OnDelete, none replaced", StatefulSet, sts(onDelete, 2, 2, 3, 0), 3, 3, true},
		{"StatefulSet OnDelete, one replaced", StatefulSet, sts(onDelete, 2, 2, 3, 1), 2, 3, true},
		{"StatefulSet OnDelete, all replaced", StatefulSet, sts(onDelete, 2, 2, 3, 3), 0, 3, true},
		{"StatefulSet OnDelete, generation not seen", StatefulSet, sts(onDelete, 3, 2, 3, 3), 3, 3, true},
		{"StatefulSet partition", StatefulSet, sts(partition(2), 2, 2, 3, 1), 2, 3, true},
		{"StatefulSet partition 0: not partial", StatefulSet, sts(partition(0), 2, 2, 3, 1), 2, 3, false},
		{"StatefulSet rolling update", StatefulSet, sts(appsv1.StatefulSetUpdateStrategy{}, 2, 2, 3, 3), 0, 3, false},
		{"DaemonSet OnDelete", DaemonSet, ds(appsv1.OnDeleteDaemonSetStrategyType, 3, 1), 2, 3, true},
		{"DaemonSet rolling update", DaemonSet, ds(appsv1.RollingUpdateDaemonSetStrategyType, 3, 3), 0, 3, false},
		{"Deployment", Deployment, &appsv1.Deployment{}, 0, 0, false},
	} {
		behind, total, partial := tc.kind.Behind(tc.obj)
		if behind != tc.behind || total != tc.total || partial != tc.partial {
			t.Errorf("%s: got %d of %d (partial %v), want %d of %d (partial %v)", tc.name, behind, total, partial, tc.behind, tc.total, tc.partial)
		}
	}
}

// TestAnnotationOwner: a Job takes annotations from its controller when that is a batch/v1
// CronJob, and from nothing else.
func TestAnnotationOwner(t *testing.T) {
	ref := func(apiVersion, kind string, controller bool) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: "nightly", UID: "u1", Controller: &controller}
	}
	for _, c := range []struct {
		name string
		kind *Kind
		refs []metav1.OwnerReference
		want bool
	}{
		{"CronJob controller", Job, []metav1.OwnerReference{ref("batch/v1", "CronJob", true)}, true},
		{"not the controller", Job, []metav1.OwnerReference{ref("batch/v1", "CronJob", false)}, false},
		{"another version", Job, []metav1.OwnerReference{ref("batch/v1beta1", "CronJob", true)}, false},
		{"another kind", Job, []metav1.OwnerReference{ref("batch/v1", "Job", true)}, false},
		{"no owner", Job, nil, false},
		{"a Deployment takes none", Deployment, []metav1.OwnerReference{ref("batch/v1", "CronJob", true)}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			obj := c.kind.New()
			obj.SetOwnerReferences(c.refs)
			k, r := c.kind.AnnotationOwner(obj)
			if got := k != nil; got != c.want {
				t.Fatalf("AnnotationOwner = %v, want one: %v", k, c.want)
			}
			if c.want && (k != CronJob || r.Name != "nightly" || r.UID != "u1") {
				t.Errorf("AnnotationOwner = %v %+v, want CronJob nightly u1", k, r)
			}
		})
	}
}

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
			got := WithOwner(c.own, c.owner)
			if !maps.Equal(got, c.want) {
				t.Errorf("WithOwner = %v, want %v", got, c.want)
			}
			if !maps.Equal(c.own, before) {
				t.Errorf("WithOwner changed the object's annotations: %v, were %v", c.own, before)
			}
		})
	}
}
