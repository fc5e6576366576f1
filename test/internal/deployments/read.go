package deployments

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/framework"
)

// Get reads a Deployment as it is now, failing the test if it cannot.
func Get(t testing.TB, c client.Client, ns, name string) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
		t.Fatalf("get deployment %s/%s: %v", ns, name, err)
	}
	return &d
}

// WaitStamp waits up to timeout until the Deployment carries want as its config hash,
// and returns it as read then.
func WaitStamp(t testing.TB, c client.Client, timeout time.Duration, ns, name, want string) *appsv1.Deployment {
	t.Helper()
	var d *appsv1.Deployment
	framework.Eventually(t, timeout, "stamp of "+name, func() error {
		d = Get(t, c, ns, name)
		if got := Hash(d); got != want {
			return fmt.Errorf("hash %q, want %q", got, want)
		}
		return nil
	})
	return d
}
