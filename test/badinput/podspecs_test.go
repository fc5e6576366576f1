package badinput

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/hashdoc"
)

// testDuplicateReferences: the API server refuses duplicate volume and container names
// (after configstamp stamped them: mutating admission runs before validation), and
// configstamp keeps serving; duplicates it lets through (one ConfigMap in two volumes,
// one key mounted twice, envFrom twice, one variable defined twice, init and app
// containers alike) are stamped with the union of what the pod sees.
func testDuplicateReferences(t *testing.T, s *suite) {
	ns := env.NewNamespace(t, true)
	create(t, configMap(ns, "a", map[string]string{"x": "1", "y": "2", "z": "3"}))
	create(t, configMap(ns, "b", map[string]string{"p": "1", "q": "2"}))
	create(t, configMap(ns, "c", map[string]string{"m": "1", "n": "2"}))

	dupVolumes := podWithVolumes("a", "b")
	dupVolumes.Volumes[1].Name = dupVolumes.Volumes[0].Name
	dupContainers := podWithVolumes("a")
	dupContainers.Containers = append(dupContainers.Containers, dupContainers.Containers[0])
	for name, spec := range map[string]corev1.PodSpec{"dup-volumes": dupVolumes, "dup-containers": dupContainers} {
		before := len(s.logs("Stamped config hash", "namespace", ns, "name", name))
		err := k8s.Create(bg, deployment(ns, name, spec))
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "Duplicate value") {
			t.Fatalf("%s: want the API server's refusal, got %v", name, err)
		}
		t.Logf("%s: %v", name, err)
		s.logRises(t, before, "Stamped config hash", "namespace", ns, "name", name)
	}

	items := func(vol, key, path string) corev1.Volume {
		v := volume(vol, "a", false)
		v.ConfigMap.Items = []corev1.KeyToPath{{Key: key, Path: path}, {Key: key, Path: path + "-again"}}
		return v
	}
	envFrom := []corev1.EnvFromSource{
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "b"}}},
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "b"}}, Prefix: "B_"},
	}
	keyRef := corev1.EnvVar{Name: "M", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "c"}, Key: "m"}}}
	app := container("app")
	app.EnvFrom, app.Env = envFrom, []corev1.EnvVar{keyRef, keyRef}
	app.VolumeMounts = []corev1.VolumeMount{{Name: "x", MountPath: "/x"}, {Name: "y", MountPath: "/y"}}
	init := container("init")
	init.EnvFrom, init.Env = envFrom, []corev1.EnvVar{keyRef}
	spec := corev1.PodSpec{InitContainers: []corev1.Container{init}, Containers: []corev1.Container{app},
		Volumes: []corev1.Volume{items("x", "x", "x"), items("y", "y", "y")}}
	create(t, deployment(ns, "dup-refs", spec))
	d := waitStamp(t, ns, "dup-refs", s.docHash(t, ns, hashdoc.Source{Name: "a", Keys: []string{"x", "y"}},
		hashdoc.Source{Name: "b", EnvOnly: true}, hashdoc.Source{Name: "c", Keys: []string{"m"}, EnvOnly: true}))
	if n := strings.Count(d.Spec.Template.Annotations[stamp.SourcesAnnotation], ","); n != 2 {
		t.Fatalf("sources %q, want three", d.Spec.Template.Annotations[stamp.SourcesAnnotation])
	}
}

// testOneConfigMapHundredTimes: a ConfigMap referenced 100 times (50 volumes, 50 key
// references) is read once per admission (the API server's audit log) and is one source.
func testOneConfigMapHundredTimes(t *testing.T, s *suite) {
	ns := env.NewNamespace(t, true)
	data := map[string]string{}
	for i := range 50 {
		data[fmt.Sprintf("k%d", i)] = fmt.Sprint(i)
	}
	create(t, configMap(ns, "one", data))
	spec := corev1.PodSpec{Containers: []corev1.Container{container("app")}}
	for i := range 50 {
		v := volume(fmt.Sprintf("v%d", i), "one", false)
		v.ConfigMap.Items = []corev1.KeyToPath{{Key: fmt.Sprintf("k%d", i), Path: "f"}}
		spec.Volumes = append(spec.Volumes, v)
		spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: "/" + v.Name})
		spec.Containers[0].Env = append(spec.Containers[0].Env, corev1.EnvVar{Name: fmt.Sprintf("E%d", i), ValueFrom: &corev1.EnvVarSource{
			ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "one"}, Key: fmt.Sprintf("k%d", 49-i)}}})
	}
	d := deployment(ns, "app", spec)
	mark := auditMark()
	want := s.docHash(t, ns, cmSource("one"))
	if got := hashOf(dryRun(t, d)); got != want {
		t.Fatalf("dry run: hash %q, want %q", got, want)
	}
	if evs := reads(t, mark, "configmaps", ns); len(evs) != 1 {
		t.Fatalf("%d reads of the ConfigMap in one admission, want 1: %+v", len(evs), evs)
	}
	create(t, d)
	got := waitStamp(t, ns, "app", want)
	if src := got.Spec.Template.Annotations[stamp.SourcesAnnotation]; strings.Count(src, "configmap/one=") != 1 || strings.Contains(src, ",") {
		t.Fatalf("sources %q, want configmap/one once", src)
	}
}

// testFiveHundredConfigMaps: a pod spec consuming 500 ConfigMaps (250 volumes, 250
// envFrom; --max-sources raised to 512) is admitted; configstamp reads each once, at most 8 at a time (the API
// server's audit log), and stamps it, or, if the reads outlast --read-timeout, admits
// it with its stored stamp (none), a log line and a read_error count.
func testFiveHundredConfigMaps(t *testing.T, s *suite) {
	ns := env.NewNamespace(t, true)
	spec := corev1.PodSpec{Containers: []corev1.Container{container("app")}}
	var srcs []hashdoc.Source
	for i := range 500 {
		name := fmt.Sprintf("cm-%03d", i)
		create(t, configMap(ns, name, map[string]string{"k": name}))
		if i%2 == 0 {
			spec.Volumes = append(spec.Volumes, volume(name, name, false))
			spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: name, MountPath: "/" + name})
			srcs = append(srcs, hashdoc.Source{Name: name})
		} else {
			spec.Containers[0].EnvFrom = append(spec.Containers[0].EnvFrom, corev1.EnvFromSource{
				ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}})
			srcs = append(srcs, hashdoc.Source{Name: name, EnvOnly: true})
		}
	}
	want := s.docHash(t, ns, srcs...)
	d := deployment(ns, "app", spec)

	// admitted checks one admission's outcome: stamped with want, or (reads past the
	// timeout) unstamped with a log line and a read_error count.
	admitted := func(what, got string, readErrors float64, logged int) {
		switch got {
		case want:
		case "":
			t.Logf("%s: admitted unstamped (read timeout)", what)
			s.logRises(t, logged, logReadError, "namespace", ns, "name", "app")
			s.metricRises(t, admissions("read_error"), readErrors)
		default:
			t.Fatalf("%s: hash %q, want %q", what, got, want)
		}
	}
	mark := auditMark()
	readErrors, logged := s.scrape(t)[admissions("read_error")], len(s.logs(logReadError, "namespace", ns, "name", "app"))
	stamped := hashOf(dryRun(t, d))
	evs := reads(t, mark, "configmaps", ns)
	seen := map[string]bool{}
	for _, ev := range evs {
		if seen[ev.ObjectRef.Name] {
			t.Fatalf("%s read twice in one admission", ev.ObjectRef.Name)
		}
		seen[ev.ObjectRef.Name] = true
	}
	if n := maxOverlap(evs); n > 8 {
		t.Fatalf("%d reads in flight at once, want at most 8", n)
	}
	t.Logf("dry run: %d reads, at most %d at once, stamped %v", len(evs), maxOverlap(evs), stamped != "")
	if stamped == want && len(evs) != 500 {
		t.Fatalf("stamped after %d reads, want 500", len(evs))
	}
	admitted("dry run", stamped, readErrors, logged)

	readErrors, logged = s.scrape(t)[admissions("read_error")], len(s.logs(logReadError, "namespace", ns, "name", "app"))
	create(t, d)
	admitted("create", hashOf(getDeployment(t, ns, "app")), readErrors, logged)
}

const logReadError = "Admitted with the stored config hash: could not read config"
