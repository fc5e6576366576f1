package main

import (
	"context"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// whoAmI asks the API server which user configstamp runs as (a SelfSubjectReview, which
// every authenticated user may create by default, and the chart grants): the webhook
// honours nudge and record markers from that user only. It retries while the API server
// is unreachable. When the answer cannot be had (an API server older than 1.28,
// tightened RBAC), it returns "" and the error: the caller runs on, honouring markers
// from anyone, as configstamp did before it had records.
func whoAmI(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme) (string, error) {
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return "", err
	}
	var user string
	var last error
	err = wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 6, Cap: 5 * time.Second},
		func(ctx context.Context) (bool, error) {
			review := &authenticationv1.SelfSubjectReview{}
			if last = c.Create(ctx, review); last != nil {
				permanent := apierrors.IsNotFound(last) || apierrors.IsForbidden(last) || apierrors.IsMethodNotSupported(last) || meta.IsNoMatchError(last)
				if permanent {
					return false, last
				}
				return false, nil
			}
			user = review.Status.UserInfo.Username
			return user != "", nil
		})
	if err != nil && last != nil {
		err = last
	}
	return user, err
}
