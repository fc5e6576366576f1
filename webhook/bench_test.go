package webhook

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// memReader serves ConfigMaps from memory, sharing their data as a decoded API response
// would hand it over: the benchmark measures the handler, not a client's copying.
type memReader map[string]*corev1.ConfigMap

func (m memReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	cm, ok := m[key.Name]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, key.Name)
	}
	*obj.(*corev1.ConfigMap) = *cm
	return nil
}

func (m memReader) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// BenchmarkHandle is one admission end to end in process: decode the review's objects,
// find the references, read and hash 5 ConfigMaps of 64 KiB, build the patch. It
// reports the 50th and 99th percentile latency besides the mean.
func BenchmarkHandle(b *testing.B) {
	for _, tc := range []struct{ n, size int }{{1, 1 << 10}, {5, 64 << 10}, {20, 64 << 10}} {
		b.Run(fmt.Sprintf("configmaps=%d/size=%dKiB", tc.n, tc.size>>10), func(b *testing.B) {
			reader := memReader{}
			var names []string
			for i := 0; i < tc.n; i++ {
				name := fmt.Sprintf("cfg-%02d", i)
				names = append(names, name)
				c := cm(name, "")
				c.Data = map[string]string{}
				for k := 0; k < 8; k++ {
					c.Data[fmt.Sprintf("file-%d.yaml", k)] = strings.Repeat("x", tc.size/8)
				}
				reader[name] = c
			}
			s := &Stamper{Reader: reader}
			req := request(b, admissionv1.Update, dep(nil, "img:2", names...), dep(nil, "img:1", names...))
			durations := make([]time.Duration, 0, 1<<16)
			b.ReportAllocs()
			for b.Loop() {
				start := time.Now()
				resp := s.Handle(context.Background(), req)
				durations = append(durations, time.Since(start))
				if len(resp.Patches) != 2 { // the stamp, and the record of it
					b.Fatalf("want two patches, got %+v", resp.Patches)
				}
			}
			slices.Sort(durations)
			b.ReportMetric(float64(durations[len(durations)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(durations[len(durations)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}
