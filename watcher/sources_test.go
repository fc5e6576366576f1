package watcher

import (
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
