package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/stamp"
)

// Objects as real clusters hold them: written by client-side kubectl apply (the
// last-applied annotation, three-way merges), by server-side apply under kubectl's field
// manager and Argo CD's (its tracking annotation, always --force-conflicts), deleted and
// re-created. Each rolls once per change its pods can see and never otherwise.

// shapeConfigMap is the ConfigMap settings with data mode and, when labelled, a label.
func shapeConfigMap(mode string, labelled bool) string {
	labels := ""
	if labelled {
		labels = "\n  labels: {example.com/edited: \"yes\"}"
	}
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings%s\ndata:\n  mode: %s\n", labels, mode)
}

// shapeWorkload is the Deployment or StatefulSet svc mounting settings, of image tag,
// with metadata annotations meta and pod-template annotations tmpl (YAML flow maps, or
// "" for none).
func shapeWorkload(kind, tag, meta, tmpl string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: apps/v1\nkind: %s\nmetadata:\n  name: svc\n", kind)
	if meta != "" {
		fmt.Fprintf(&b, "  annotations: %s\n", meta)
	}
	b.WriteString("spec:\n  replicas: 2\n  selector:\n    matchLabels: {app: svc}\n")
	if kind == "StatefulSet" {
		b.WriteString("  serviceName: svc\n  podManagementPolicy: Parallel\n")
	}
	b.WriteString("  template:\n    metadata:\n      labels: {app: svc}\n")
	if tmpl != "" {
		fmt.Fprintf(&b, "      annotations: %s\n", tmpl)
	}
	fmt.Fprintf(&b, `    spec:
      containers:
      - name: svc
        image: registry.example/svc:%s
        volumeMounts:
        - {name: settings, mountPath: /etc/svc}
      volumes:
      - name: settings
        configMap: {name: settings}
`, tag)
	return b.String()
}

// shaped is one workload of a shapes test: its kind, namespace, and kubectl in a
// directory holding its manifests.
type shaped struct {
	t       *testing.T
	kind    string
	ns, dir string
}

func newShaped(t *testing.T, kind string) *shaped {
	return &shaped{t: t, kind: kind, ns: env.NewNamespace(t, true), dir: t.TempDir()}
}

func (s *shaped) kubectl(args ...string) string {
	s.t.Helper()
	return tool(s.t, s.dir, nil, "kubectl", append([]string{"--namespace", s.ns}, args...)...)
}

// apply writes manifest to a file and runs kubectl apply on it with args.
func (s *shaped) apply(manifest string, args ...string) {
	s.t.Helper()
	writeFile(s.t, filepath.Join(s.dir, "m.yaml"), manifest)
	s.kubectl(append([]string{"apply", "-f", "m.yaml"}, args...)...)
}

// object reads svc.
func (s *shaped) object() (metav1.Object, *metav1.ObjectMeta) {
	s.t.Helper()
	if s.kind == "StatefulSet" {
		o := env.StatefulSet(s.t, s.ns, "svc")
		return o, &o.Spec.Template.ObjectMeta
	}
	o := deployment(s.t, s.ns, "svc")
	return o, &o.Spec.Template.ObjectMeta
}

// rollouts waits until svc has made n rollouts (ReplicaSets or ControllerRevisions) and
// made no other over settle; it returns its generation and pod-template annotations.
func (s *shaped) rollouts(n int) (int64, map[string]string) {
	s.t.Helper()
	return s.rolloutsOver(n, settle)
}

// rolled is rollouts without the wait for an unwanted one: where nothing the test did
// could cause one later (a re-apply that changed nothing, the first rollout of a
// create), or the next count would show it.
func (s *shaped) rolled(n int) (int64, map[string]string) {
	s.t.Helper()
	return s.rolloutsOver(n, 0)
}

func (s *shaped) rolloutsOver(n int, settle time.Duration) (int64, map[string]string) {
	s.t.Helper()
	if s.kind == "StatefulSet" {
		o := env.ExpectRevisions(s.t, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "svc"}}, n, settle).(*appsv1.StatefulSet)
		return o.Generation, o.Spec.Template.Annotations
	}
	d := env.ExpectReplicaSets(s.t, s.ns, "svc", n, settle)
	return d.Generation, d.Spec.Template.Annotations
}

// same asserts that svc still has generation gen and config hash hash.
func (s *shaped) same(what string, gen int64, hash string) {
	s.t.Helper()
	o, tmpl := s.object()
	if o.GetGeneration() != gen || tmpl.Annotations[stamp.HashAnnotation] != hash {
		s.t.Fatalf("%s: generation %d -> %d, hash %s -> %s", what, gen, o.GetGeneration(), short(hash), short(tmpl.Annotations[stamp.HashAnnotation]))
	}
}

// TestClientSideApply: workloads written with client-side kubectl apply. Re-applied
// unchanged they roll nothing; re-applied without their pod-template annotations (the
// three-way merge deletes the whole map, stamp included) they roll once and keep their
// stamp; a label-only apply of their ConfigMap rolls nothing, a data change once. A
// Deployment deleted and applied again is stamped at creation and rolls once.
func TestClientSideApply(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"Deployment", "StatefulSet"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newShaped(t, kind)
			app := func(tmpl string) string {
				return shapeConfigMap("blue", false) + "---\n" + shapeWorkload(kind, "1.0", "", tmpl)
			}
			s.apply(app("{example.com/team: a}"))
			gen, ann := s.rolled(1)
			h := ann[stamp.HashAnnotation]
			if h == "" {
				t.Fatal("not stamped on a client-side apply")
			}
			for i := range 2 {
				s.apply(app("{example.com/team: a}"))
				s.same(fmt.Sprintf("unchanged re-apply %d", i+1), gen, h)
			}

			s.apply(app(""))
			gen, ann = s.rolled(2) // the label-only apply below waits for a second one
			if ann[stamp.HashAnnotation] != h || ann["example.com/team"] != "" {
				t.Fatalf("apply without template annotations: annotations %v, want the stamp %s alone", ann, short(h))
			}
			s.apply(app(""))
			s.same("unchanged re-apply", gen, h)

			s.apply(shapeConfigMap("blue", true))
			s.rollouts(2)
			s.apply(shapeConfigMap("green", true))
			_, ann = s.rollouts(3)
			if ann[stamp.HashAnnotation] == h || ann[stamp.HashAnnotation] == "" {
				t.Fatalf("ConfigMap data change: hash %s -> %s", short(h), short(ann[stamp.HashAnnotation]))
			}
			if kind != "Deployment" {
				return
			}
			h = ann[stamp.HashAnnotation]
			old := deployment(t, s.ns, "svc").UID
			s.kubectl("delete", "deployment", "svc", "--wait")
			s.apply(shapeWorkload(kind, "1.0", "", ""))
			d := expectReplicaSets(t, s.ns, "svc", 1)
			if d.UID == old || hashOf(d) != h {
				t.Fatalf("re-created Deployment: uid %s (was %s), hash %s, want %s", d.UID, old, short(hashOf(d)), short(h))
			}
		})
	}
}

// TestServerSideApply: workloads and their ConfigMap written with server-side apply,
// under kubectl's field manager and as Argo CD writes (field manager argocd-controller,
// its tracking annotation, always --force-conflicts). Re-applied three times they roll
// nothing: no field manager owns the stamp (an applier's apply without it would delete it); a
// label-only apply of the ConfigMap rolls nothing, a data change once; a template change
// applied by another manager taking fields over with --force-conflicts rolls once and
// keeps the stamp.
func TestServerSideApply(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, manager, meta string
		force               bool
	}{
		{"kubectl", "kubectl", "", false},
		{"argocd", "argocd-controller", "{argocd.argoproj.io/tracking-id: \"svc:apps/Deployment:NS/svc\"}", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newShaped(t, "Deployment")
			meta := strings.ReplaceAll(c.meta, "NS", s.ns)
			ssa := func(manager string, force bool, manifest string) {
				t.Helper()
				args := []string{"--server-side", "--field-manager", manager}
				if force {
					args = append(args, "--force-conflicts")
				}
				s.apply(manifest, args...)
			}
			app := func(tag string) string {
				return shapeConfigMap("blue", false) + "---\n" + shapeWorkload("Deployment", tag, meta, "")
			}
			ssa(c.manager, c.force, app("1.0"))
			gen, ann := s.rolled(1)
			h := ann[stamp.HashAnnotation]
			if h == "" {
				t.Fatal("not stamped on a server-side apply")
			}
			for i := range 3 {
				ssa(c.manager, c.force, app("1.0"))
				s.same(fmt.Sprintf("re-apply %d", i+1), gen, h)
			}
			notOwnedBy(t, deployment(t, s.ns, "svc"), c.manager)

			ssa(c.manager, c.force, shapeConfigMap("blue", true))
			s.rollouts(1)
			ssa(c.manager, c.force, shapeConfigMap("green", true))
			gen, ann = s.rollouts(2)
			if h2 := ann[stamp.HashAnnotation]; h2 == h || h2 == "" {
				t.Fatalf("ConfigMap data change: hash %s -> %s", short(h), short(h2))
			}
			h = ann[stamp.HashAnnotation]
			ssa(c.manager, c.force, shapeWorkload("Deployment", "1.0", meta, ""))
			s.same("re-apply after the rollout", gen, h)

			// Another manager takes the image over.
			other := shapeWorkload("Deployment", "2.0", meta, "")
			writeFile(t, filepath.Join(s.dir, "m.yaml"), other)
			if out, err := env.Command(s.dir, nil, "kubectl", "--namespace", s.ns, "apply", "-f", "m.yaml", "--server-side",
				"--field-manager", "other").CombinedOutput(); err == nil || !strings.Contains(string(out), "conflict") {
				t.Fatalf("apply of a field another manager owns: %v, want a conflict:\n%s", err, out)
			}
			ssa("other", true, other)
			gen, ann = s.rollouts(3)
			if ann[stamp.HashAnnotation] != h {
				t.Fatalf("template change by another manager: hash %s -> %s", short(h), short(ann[stamp.HashAnnotation]))
			}
			for i := range 3 {
				ssa("other", true, other)
				s.same(fmt.Sprintf("re-apply by the new owner %d", i+1), gen, h)
			}
			d := deployment(t, s.ns, "svc")
			notOwnedBy(t, d, c.manager)
			notOwnedBy(t, d, "other")
		})
	}
}

// notOwnedBy asserts that manager owns the pod-template labels it applied (the fields
// are read right) and that no managedFields entry, manager's or any other's (the
// watcher's nudges included), owns the stamp's annotations: the webhook writes them
// after the API server has assigned the request's fields, as docs/gitops.md says.
func notOwnedBy(t *testing.T, d *appsv1.Deployment, manager string) {
	t.Helper()
	applied := false
	for _, mf := range d.ManagedFields {
		if mf.FieldsV1 == nil {
			continue
		}
		var fields map[string]any
		if err := json.Unmarshal(mf.FieldsV1.Raw, &fields); err != nil {
			t.Fatal(err)
		}
		tmpl := func(k string) map[string]any {
			m, _ := dig(fields, "f:spec", "f:template", "f:metadata", k).(map[string]any)
			return m
		}
		if _, ok := tmpl("f:labels")["f:app"]; ok && mf.Manager == manager {
			applied = true
		}
		for _, key := range []string{stamp.HashAnnotation, stamp.SourcesAnnotation} {
			if _, ok := tmpl("f:annotations")["f:"+key]; ok {
				t.Fatalf("%s (%s) owns %s: %s", mf.Manager, mf.Operation, key, mf.FieldsV1.Raw)
			}
		}
	}
	if !applied {
		t.Fatalf("%s owns no pod-template label app in %d managedFields entries", manager, len(d.ManagedFields))
	}
}

// dig walks nested maps by keys.
func dig(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}
