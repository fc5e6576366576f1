package secrets

import (
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

// The Secrets Store CSI driver is not run (no nodes mount anything here): its CRDs are
// installed (test/testdata/secrets-store-csi) and the test writes the
// SecretProviderClassPodStatus objects of the Deployments' pods as the driver does, one
// per pod and class: named <pod>-<namespace>-<class>, labelled with the pod's node,
// owned by the pod (so the garbage collector deletes it with the pod), the object
// versions in its status; a rotation rewrites the versions of existing ones.

const (
	csiGroup    = "secrets-store.csi.x-k8s.io"
	csiObjectID = "secret/db"
)

func csiVolumeOf(class string) corev1.Volume {
	return corev1.Volume{Name: "csi-" + class, VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
		Driver: stamp.CSIDriver, ReadOnly: new(true), VolumeAttributes: map[string]string{stamp.CSIClassAttribute: class}}}}
}

func createClass(t testing.TB, ns, name string) {
	t.Helper()
	spc := &unstructured.Unstructured{}
	spc.SetAPIVersion(csiGroup + "/v1")
	spc.SetKind("SecretProviderClass")
	spc.SetNamespace(ns)
	spc.SetName(name)
	_ = unstructured.SetNestedField(spc.Object, "vault", "spec", "provider")
	_ = unstructured.SetNestedStringMap(spc.Object, map[string]string{"objects": "- objectName: db"}, "spec", "parameters")
	if err := env.Client.Create(bg, spc); err != nil {
		t.Fatalf("create secretproviderclass %s/%s: %v", ns, name, err)
	}
}

func newPodStatus() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(csiGroup + "/v1")
	u.SetKind("SecretProviderClassPodStatus")
	return u
}

// mountStatus writes, as the driver does, the pod status of one pod and class with
// version of csiObjectID: created at the pod's mount, its versions rewritten by a
// rotation. It reports whether it wrote anything.
func mountStatus(t testing.TB, pod *corev1.Pod, class, version string) bool {
	t.Helper()
	name := pod.Name + "-" + pod.Namespace + "-" + class
	st := newPodStatus()
	err := env.Client.Get(bg, client.ObjectKey{Namespace: pod.Namespace, Name: name}, st)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	objects := []any{map[string]any{"id": csiObjectID, "version": version}}
	if err == nil {
		if old, _, _ := unstructured.NestedSlice(st.Object, "status", "objects"); fmt.Sprint(old) == fmt.Sprint(objects) {
			return false
		}
		_ = unstructured.SetNestedSlice(st.Object, objects, "status", "objects")
		if err := env.Client.Update(bg, st); err != nil {
			t.Fatalf("rotate %s: %v", name, err)
		}
		return true
	}
	st = newPodStatus()
	st.SetNamespace(pod.Namespace)
	st.SetName(name)
	st.SetLabels(map[string]string{"internal.secrets-store.csi.k8s.io/node-name": pod.Spec.NodeName})
	st.Object["metadata"].(map[string]any)["ownerReferences"] = []any{map[string]any{
		"apiVersion": "v1", "kind": "Pod", "name": pod.Name, "uid": string(pod.UID)}}
	st.Object["status"] = map[string]any{
		"podName": pod.Name, "secretProviderClassName": class, "mounted": true,
		"targetPath": "/var/lib/kubelet/pods/" + string(pod.UID) + "/volumes/kubernetes.io~csi/csi-" + class + "/mount",
		"objects":    objects,
	}
	if err := env.Client.Create(bg, st); err != nil {
		t.Fatalf("mount %s: %v", name, err)
	}
	return true
}

// mountAll writes the pod statuses of every pod of the Deployment (app=name) that is
// not being deleted, with version: what the driver records at mounts and rotations.
func mountAll(t testing.TB, ns, name, class, version string) int {
	t.Helper()
	var pods corev1.PodList
	if err := env.Client.List(bg, &pods, client.InNamespace(ns), client.MatchingLabels{"app": name}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && mountStatus(t, p, class, version) {
			n++
		}
	}
	return n
}

// rolledTo waits until the Deployment has n ReplicaSets and its rollout is complete,
// without rollouts' settle: a later rollouts call of the same count asserts that no
// other rollout followed (ReplicaSets stay).
func rolledTo(t testing.TB, ns, name string, n int) {
	t.Helper()
	framework.Eventually(t, time.Minute, fmt.Sprintf("%s has %d ReplicaSets", name, n), func() error {
		if got := len(env.ReplicaSets(t, env.Deployment(t, ns, name))); got != n {
			return fmt.Errorf("%d ReplicaSets, want %d", got, n)
		}
		return nil
	})
	env.RolledOut(t, ns, name)
}

// classDigest is the documented keyed digest of a SecretProviderClass whose driver
// records versions (id -> version; none: no versions yet), in hex.
func classDigest(key []byte, ns, class string, versions map[string]string) string {
	return hex.EncodeToString(keyed(namespaceKey(key, ns), encodeSource(stamp.KindSecretProviderClass, class, nil, versions)))
}

// TestCSI runs configstamp twice: without --csi-secrets (a rotation rolls nothing, and
// nothing of the driver's is read), then with it, for a Deployment created while it was
// down (adopted without a rollout) and one created after: the first mounts roll
// nothing, a rotation v1 -> v2 rolls once, the new pods' own statuses with v2 roll nothing more,
// a rotation of a class the Deployment does not mount rolls nothing, the stamp
// holds only keyed digests, and pods mounting versions of their own roll nothing.
func TestCSI(t *testing.T) {
	dir := filepath.Join(cluster.RepoRoot(), "test", "testdata", "secrets-store-csi")
	for _, f := range []string{"secretproviderclasses.yaml", "secretproviderclasspodstatuses.yaml"} {
		if err := env.InstallCRDs(bg, filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	ns := env.NewNamespace(t, true)
	keyNS := env.NewNamespace(t, false)
	createClass(t, ns, "db")
	createClass(t, ns, "other")
	createConfigMap(t, ns, "app", map[string]string{"k": "1"})
	spec := container(corev1.Container{}, configMapVolume("app"), csiVolumeOf("db"))

	t.Run("off", func(t *testing.T) {
		mark := auditMark()
		cs := env.Start(t, framework.Options{Args: []string{"--hash-key", keyNS + "/key"}})
		createDeployment(t, ns, "csioff", spec)
		rolledTo(t, ns, "csioff", 1)
		d := env.Deployment(t, ns, "csioff")
		if got := d.Spec.Template.Annotations[stamp.SourcesAnnotation]; strings.Contains(got, stamp.KindSecretProviderClass) {
			t.Fatalf("off: sources %q name a SecretProviderClass", got)
		}
		before := checks(cs, ns, "csioff")
		mountAll(t, ns, "csioff", "db", "v1")
		mountAll(t, ns, "csioff", "db", "v2")
		// A ConfigMap change is checked (the rotation is not even seen): proof the
		// watcher ran while the statuses changed.
		setConfigMapData(t, ns, "app", "k", "2")
		checkedAfter(t, cs, ns, "csioff", before)
		rollouts(t, ns, "csioff", 2)
		cs.Stop()
		for _, ev := range auditSince(t, mark) {
			if strings.HasPrefix(ev.ObjectRef.Resource, "secretproviderclass") {
				t.Errorf("with --csi-secrets off, configstamp's user did %s on %s %s/%s", ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Namespace, ev.ObjectRef.Name)
			}
		}
	})

	t.Run("on", func(t *testing.T) {
		// A namespace of its own: no pod has mounted its classes yet.
		ns := env.NewNamespace(t, true)
		createClass(t, ns, "db")
		createClass(t, ns, "other")
		createConfigMap(t, ns, "app", map[string]string{"k": "1"})
		// "early" is created while configstamp is down (admitted unstamped: the
		// registration fails open), its pods mounting their own class at v1.
		createClass(t, ns, "early")
		createDeployment(t, ns, "early", container(corev1.Container{}, configMapVolume("app"), csiVolumeOf("early")))
		rolledTo(t, ns, "early", 1)
		mountAll(t, ns, "early", "early", "v1")

		cs := env.Start(t, framework.Options{Args: []string{"--hash-key", keyNS + "/key", "--csi-secrets"}})
		key := readKey(t, keyNS, "key")
		// Adopted without a rollout; its rotation then rolls it once, its new pods' own
		// statuses roll nothing.
		checkedAfter(t, cs, ns, "early", 0)
		rolledTo(t, ns, "early", 1)
		before := checks(cs, ns, "early")
		mountAll(t, ns, "early", "early", "v2")
		checkedAfter(t, cs, ns, "early", before)
		rolledTo(t, ns, "early", 2)
		before = checks(cs, ns, "early")
		if n := mountAll(t, ns, "early", "early", "v2"); n == 0 {
			t.Fatal("the rolled Deployment early has no new pod to mount")
		}
		checkedAfter(t, cs, ns, "early", before)
		rollouts(t, ns, "early", 2)
		createDeployment(t, ns, "csi", spec)
		rolledTo(t, ns, "csi", 1)
		d := env.Deployment(t, ns, "csi")
		pending := "secretproviderclass/db=" + classDigest(key, ns, "db", nil)[:12]
		if got := d.Spec.Template.Annotations[stamp.SourcesAnnotation]; !strings.Contains(got, pending) {
			t.Fatalf("created before any mount: sources %q, want %q (no versions yet)", got, pending)
		}

		// The first mounts record v1: the pods run it already.
		before = checks(cs, ns, "csi")
		if n := mountAll(t, ns, "csi", "db", "v1"); n != 2 {
			t.Fatalf("mounted %d pods, want 2", n)
		}
		checkedAfter(t, cs, ns, "csi", before)
		rolledTo(t, ns, "csi", 1)

		// A rotation of a class the Deployment does not mount, in a bare pod that then
		// mounts the Deployment's class too (a first mount: the check it brings must
		// find the Deployment's stamp current).
		other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bystander"},
			Spec: container(corev1.Container{}, csiVolumeOf("other"), csiVolumeOf("db"))}
		if err := env.Client.Create(bg, other); err != nil {
			t.Fatal(err)
		}
		mountStatus(t, other, "other", "v1")
		mountStatus(t, other, "other", "v2")
		before = checks(cs, ns, "csi")
		mountStatus(t, other, "db", "v1")
		checkedAfter(t, cs, ns, "csi", before)
		rollouts(t, ns, "csi", 1)

		// The driver's rotation rewrites v2 into each pod's status: one rollout.
		before = checks(cs, ns, "csi")
		mountAll(t, ns, "csi", "db", "v2")
		checkedAfter(t, cs, ns, "csi", before)
		rolledTo(t, ns, "csi", 2)
		// The new pods mount and record v2 themselves: nothing more.
		before = checks(cs, ns, "csi")
		if n := mountAll(t, ns, "csi", "db", "v2"); n == 0 {
			t.Fatal("the rolled Deployment has no new pod to mount")
		}
		checkedAfter(t, cs, ns, "csi", before)
		d = rollouts(t, ns, "csi", 2)

		// Only keyed digests: the documented HMAC, never a plain hash of the versions.
		v2 := map[string]string{csiObjectID: "v2"}
		sources := d.Spec.Template.Annotations[stamp.SourcesAnnotation]
		if want := "secretproviderclass/db=" + classDigest(key, ns, "db", v2)[:12]; !strings.Contains(sources, want) {
			t.Errorf("sources %q, want %q", sources, want)
		}
		all := sources + " " + d.Spec.Template.Annotations[stamp.HashAnnotation]
		for _, plain := range []string{hexSum(encodeSource(stamp.KindSecretProviderClass, "db", nil, v2))[:12], hexSum([]byte("v2"))[:12], "v2"} {
			if strings.Contains(all, plain) {
				t.Errorf("stamp %q holds an unkeyed digest or a version (%s)", all, plain)
			}
		}

		// A provider giving each pod versions of its own (Vault dynamic secrets): a
		// Deployment created after another pod mounted its class is not rolled by its
		// pods' mounts (following the latest status rolled it at every new pod).
		createClass(t, ns, "dyn")
		lone := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dyn-bystander"},
			Spec: container(corev1.Container{}, csiVolumeOf("dyn"))}
		if err := env.Client.Create(bg, lone); err != nil {
			t.Fatal(err)
		}
		mountStatus(t, lone, "dyn", lone.Name)
		createDeployment(t, ns, "dyn", container(corev1.Container{}, csiVolumeOf("dyn")))
		rolledTo(t, ns, "dyn", 1)
		before = checks(cs, ns, "dyn")
		var pods corev1.PodList
		if err := env.Client.List(bg, &pods, client.InNamespace(ns), client.MatchingLabels{"app": "dyn"}); err != nil {
			t.Fatal(err)
		}
		for i := range pods.Items {
			mountStatus(t, &pods.Items[i], "dyn", pods.Items[i].Name)
		}
		checkedAfter(t, cs, ns, "dyn", before) // its ReplicaSets are counted after the restart's settle

		// A restart rolls nothing.
		cs.Stop()
		cs = env.Start(t, framework.Options{Args: []string{"--hash-key", keyNS + "/key", "--csi-secrets"}})
		checkedAfter(t, cs, ns, "csi", 0) // its check at start
		rollouts(t, ns, "csi", 2)
		if n := len(env.ReplicaSets(t, env.Deployment(t, ns, "dyn"))); n != 1 {
			t.Errorf("dyn has %d ReplicaSets, want 1: its pods' own versions rolled it", n)
		}
		cs.Stop()
	})
}
