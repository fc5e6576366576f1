package main

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// whoAmI asks the API server which user configstamp runs as (a SelfSubjectReview, which
// every authenticated user may create): the webhook honours nudge and record markers from
// that user only. It retries while the API server is unreachable.
func whoAmI(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme) (string, error) {
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return "", fmt.Errorf("create client: %w", err)
	}
	var user string
	var last error
	err = wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 8, Cap: 10 * time.Second},
		func(ctx context.Context) (bool, error) {
			review := &authenticationv1.SelfSubjectReview{}
			if last = c.Create(ctx, review); last != nil {
				return false, nil
			}
			user = review.Status.UserInfo.Username
			return user != "", nil
		})
	if err != nil {
		return "", fmt.Errorf("find the user configstamp runs as (SelfSubjectReview): %w (last error: %v)", err, last)
	}
	return user, nil
}
