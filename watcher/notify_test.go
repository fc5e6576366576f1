package watcher

import (
	"context"
	"testing"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/internal/notify"
	"github.com/configstamp/configstamp/internal/workload"
)

// A notification's batch key names a change by the changed sources' resourceVersions:
// workloads consuming different keys of one ConfigMap (different digests of it) share
// it; a later change of it does not.
func TestChangeOfNamesVersions(t *testing.T) {
	rv := "41"
	r := &workloadReconciler{config: &configread.Reader{Seen: func(_ context.Context, kind, namespace, name string) string {
		if kind == "configmap" && namespace == "ns" && name == "app" {
			return rv
		}
		return ""
	}}}
	ctx := context.Background()
	whole, _ := r.changeOf(ctx, "ns", "configmap/app=111111111111,configmap/x=aaaaaaaaaaaa", "configmap/app=222222222222,configmap/x=aaaaaaaaaaaa", "h")
	oneKey, srcs := r.changeOf(ctx, "ns", "configmap/app=333333333333", "configmap/app=444444444444", "h")
	if whole != oneKey || whole != "configmap/app@41" || len(srcs) != 1 || srcs[0] != "configmap/app" {
		t.Fatalf("one change: %q and %q (sources %v), want configmap/app@41 for both", whole, oneKey, srcs)
	}
	rv = "42"
	if later, _ := r.changeOf(ctx, "ns", "configmap/app=222222222222", "configmap/app=555555555555", "h"); later == whole {
		t.Fatalf("a later change has the same key %q", later)
	}
	// Not held by the watcher: the digest; no source changed: the config hash.
	if got, _ := r.changeOf(ctx, "ns", "secret/db=111111111111", "secret/db=222222222222", "h"); got != "secret/db=222222222222" {
		t.Errorf("unheld source: %q", got)
	}
	if got, _ := r.changeOf(ctx, "ns", "configmap/app=111111111111", "configmap/app=111111111111", "0123456789abcdef"); got != "config-hash=0123456789ab" {
		t.Errorf("no source changed: %q", got)
	}
}

// A CronJob's restamp is notified as one, not as a rollout: nothing started.
func TestRolledEventOfKindWithoutPods(t *testing.T) {
	ctx := context.Background()
	before, after := "configmap/app=111111111111", "configmap/app=222222222222"
	for _, tc := range []struct {
		kind *workload.Kind
		want notify.Kind
	}{{workload.Deployment, notify.Rolled}, {workload.CronJob, notify.Restamped}} {
		r := &workloadReconciler{kind: tc.kind}
		obj := tc.kind.New()
		obj.SetNamespace("ns")
		obj.SetName("w")
		ev := r.rolledEvent(ctx, obj, before, after, "h", "configmap/app changed")
		if ev.Kind != tc.want || ev.Workload != tc.kind.Kind+"/w" || ev.Reason != "configmap/app changed" || ev.Change != "configmap/app=222222222222" {
			t.Errorf("%s: %+v, want kind %s", tc.kind.Kind, ev, tc.want)
		}
	}
}
