package watcher

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestLastWrite(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
	if got := lastWrite(obj); !got.Equal(created) {
		t.Fatalf("no managed fields: %v, want creation %v", got, created)
	}
	later := metav1.NewTime(created.Add(time.Hour))
	latest := metav1.NewTime(created.Add(2 * time.Hour))
	obj.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "a", Time: &latest}, {Manager: "b", Time: &later}, {Manager: "c"}}
	if got := lastWrite(obj); !got.Equal(latest.Time) {
		t.Fatalf("lastWrite = %v, want the latest managed-fields time %v", got, latest)
	}
}

func TestChangedSources(t *testing.T) {
	tests := []struct {
		before, after string
		want          []string
	}{
		{"", "configmap/a=111111111111", []string{"configmap/a"}},
		{"configmap/a=111111111111", "configmap/a=111111111111", []string{"first stamp"}},
		{"configmap/a=111111111111,configmap/b=222222222222", "configmap/a=111111111111,configmap/b=333333333333", []string{"configmap/b"}},
		{"configmap/a=111111111111", "configmap/a=111111111111,configmap/new=missing", []string{"configmap/new"}},
		{"configmap/a=111111111111,configmap/gone=222222222222", "configmap/a=111111111111", []string{"configmap/gone"}},
	}
	for _, tt := range tests {
		if got := changedSources(tt.before, tt.after); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("changedSources(%q, %q) = %v, want %v", tt.before, tt.after, got, tt.want)
		}
	}
}
