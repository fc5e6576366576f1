package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/stamp"
)

// memReader serves ConfigMaps and Secrets from memory, sharing their data as a decoded
// API response would hand it over: the benchmark measures the handler, not a client's
// copying.
type memReader struct {
	configMaps map[string]*corev1.ConfigMap
	secrets    map[string]*corev1.Secret
}

func (m memReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		if cm, ok := m.configMaps[key.Name]; ok {
			*o = *cm
			return nil
		}
		return apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, key.Name)
	case *corev1.Secret:
		if sec, ok := m.secrets[key.Name]; ok {
			*o = *sec
			return nil
		}
		return apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, key.Name)
	}
	return fmt.Errorf("memReader: cannot read a %T", obj)
}

func (m memReader) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// benchCase is one admission the benchmark measures: a workload of kind consuming n
// sources (ConfigMaps or Secrets) of size bytes each, through volumes.
type benchCase struct {
	name    string
	kind    string // "Deployment" or "StatefulSet"
	secrets bool
	n, size int
}

// BenchmarkHandle is one admission end to end in process: decode the review's objects,
// find the references, read and hash the sources, build the patch. It reports the 50th
// and 99th percentile latency besides the mean. The Deployment cases consuming
// ConfigMaps keep their names (configmaps=N/size=S); a StatefulSet with the same
// content adds /kind=StatefulSet (benchstat -col /kind compares it with the Deployment),
// and a Deployment consuming Secrets of the same content is secrets=N/size=S
// (Secrets enabled, HMAC-SHA256 digests under a 32-byte key).
func BenchmarkHandle(b *testing.B) {
	cases := []benchCase{
		{n: 1, size: 1 << 10}, {n: 5, size: 64 << 10}, {n: 20, size: 64 << 10},
		{name: "/kind=StatefulSet", kind: "StatefulSet", n: 5, size: 64 << 10},
		{secrets: true, n: 1, size: 1 << 10}, {secrets: true, n: 5, size: 64 << 10},
	}
	for _, tc := range cases {
		sources := "configmaps"
		if tc.secrets {
			sources = "secrets"
		}
		b.Run(fmt.Sprintf("%s=%d/size=%dKiB%s", sources, tc.n, tc.size>>10, tc.name), func(b *testing.B) {
			reader := memReader{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
			var names []string
			for i := 0; i < tc.n; i++ {
				name := fmt.Sprintf("cfg-%02d", i)
				names = append(names, name)
				c := cm(name, "")
				c.Data = map[string]string{}
				for k := 0; k < 8; k++ {
					c.Data[fmt.Sprintf("file-%d.yaml", k)] = strings.Repeat("x", tc.size/8)
				}
				reader.configMaps[name] = c
				sec := &corev1.Secret{ObjectMeta: c.ObjectMeta, Data: map[string][]byte{}}
				for k, v := range c.Data {
					sec.Data[k] = []byte(v)
				}
				reader.secrets[name] = sec
			}
			s := &Stamper{Reader: reader, Key: testKey}
			if tc.secrets {
				key := []byte(strings.Repeat("k", 32))
				s.Sources, s.Key = stamp.Options{Secrets: true}, func() []byte { return key }
			}
			req := benchRequest(b, tc, "img:2", "img:1", names)
			// The handler logs through the context's logger: a discarding one, so that
			// controller-runtime's unset root logger does not complain into the output
			// (after 30 s) and break benchstat's parsing.
			ctx := logf.IntoContext(context.Background(), logr.Discard())
			durations := make([]time.Duration, 0, 1<<16)
			b.ReportAllocs()
			for b.Loop() {
				start := time.Now()
				resp := s.Handle(ctx, req)
				durations = append(durations, time.Since(start))
				if len(resp.Patches) != 3 { // the stamp, its record, the per-key digests
					b.Fatalf("want three patches, got %+v", resp.Patches)
				}
			}
			slices.Sort(durations)
			b.ReportMetric(float64(durations[len(durations)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(durations[len(durations)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}

// benchRequest is an UPDATE of the case's workload changing its image (so it is
// stamped), its sources mounted as volumes.
func benchRequest(b *testing.B, tc benchCase, image, oldImage string, names []string) admission.Request {
	b.Helper()
	build := func(image string) *appsv1.Deployment {
		d := dep(nil, image)
		for _, n := range names {
			vs := corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: n}}}
			if tc.secrets {
				vs = corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: n}}
			}
			d.Spec.Template.Spec.Volumes = append(d.Spec.Template.Spec.Volumes, corev1.Volume{Name: n, VolumeSource: vs})
		}
		return d
	}
	if tc.kind == "" || tc.kind == "Deployment" {
		return request(b, admissionv1.Update, build(image), build(oldImage))
	}
	raw := func(image string) runtime.RawExtension {
		d := build(image)
		sts := &appsv1.StatefulSet{ObjectMeta: d.ObjectMeta, Spec: appsv1.StatefulSetSpec{Template: d.Spec.Template}}
		raw, err := json.Marshal(sts)
		if err != nil {
			b.Fatal(err)
		}
		return runtime.RawExtension{Raw: raw}
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "uid", Kind: metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: tc.kind},
		Operation: admissionv1.Update, Namespace: "ns", Name: "app", Object: raw(image), OldObject: raw(oldImage),
	}}
}
