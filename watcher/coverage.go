package watcher

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/configstamp/configstamp/stamp"
)

// Coverage keys besides the workload kinds' resources.
const coverageSecrets = "secrets"

// coverage keeps, in the registration's CoverageAnnotation, when configstamp began to
// stamp each workload kind and to count Secrets (the API server's clock). The
// registration's creation alone cannot say it: an upgrade that adds a kind keeps the
// registration, and a workload of the new kind created before it was never stamped
// because nothing covered it, not because the webhook was bypassed. A missing entry is
// written at the first start that covers it; anything before it counts as installed
// over (recorded, not rolled).
type coverage struct {
	live         client.Reader
	writer       client.Client
	registration string
	serverNow    func(context.Context) (time.Time, error)

	mu    sync.Mutex
	since map[string]time.Time
}

// of returns when key began to be covered; zero when unknown (not written yet, or the
// registration does not exist): evidence then takes every unstamped workload as
// installed over.
func (c *coverage) of(ctx context.Context, key string) (time.Time, error) {
	c.mu.Lock()
	t, ok := c.since[key]
	c.mu.Unlock()
	if ok {
		return t, nil
	}
	m, _, err := c.read(ctx)
	if err != nil {
		return time.Time{}, err
	}
	return m[key], nil
}

// read returns the registration's coverage entries (caching them) and its
// resourceVersion ("" when it does not exist).
func (c *coverage) read(ctx context.Context) (map[string]time.Time, string, error) {
	var reg admissionregistrationv1.MutatingWebhookConfiguration
	err := c.live.Get(ctx, client.ObjectKey{Name: c.registration}, &reg)
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("get registration %s: %w", c.registration, err)
	}
	m := map[string]time.Time{}
	if v := reg.Annotations[stamp.CoverageAnnotation]; v != "" {
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			// Unreadable (edited by hand): as if absent; it is written afresh.
			logf.FromContext(ctx).Info("Ignored an unreadable coverage annotation on the registration", "registration", c.registration, "error", err.Error())
			m = map[string]time.Time{}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.since == nil {
		c.since = map[string]time.Time{}
	}
	for k, t := range m {
		c.since[k] = t
	}
	return m, reg.ResourceVersion, nil
}

// ensure writes now (the API server's clock) for every key the registration has no
// entry for. It waits for the registration to exist.
func (c *coverage) ensure(ctx context.Context, keys ...string) error {
	return wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		m, rv, err := c.read(ctx)
		if err != nil || rv == "" {
			if err != nil {
				logf.FromContext(ctx).Error(err, "Could not read the registration's coverage; retrying")
			}
			return false, nil
		}
		now, err := c.serverNow(ctx)
		if err != nil {
			logf.FromContext(ctx).Error(err, "Could not read the API server's clock; retrying")
			return false, nil
		}
		added := false
		for _, k := range keys {
			if _, ok := m[k]; !ok {
				m[k] = now.UTC().Truncate(time.Second)
				added = true
			}
		}
		if !added {
			return true, nil
		}
		b, _ := json.Marshal(m)
		// Conditional on what was read: a concurrent writer's entries are never lost.
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": rv, "annotations": map[string]string{stamp.CoverageAnnotation: string(b)}}})
		reg := &admissionregistrationv1.MutatingWebhookConfiguration{}
		reg.Name = c.registration
		if err := c.writer.Patch(ctx, reg, client.RawPatch(types.MergePatchType, patch)); err != nil {
			if !apierrors.IsConflict(err) {
				logf.FromContext(ctx).Error(err, "Could not write the registration's coverage; retrying")
			}
			return false, nil
		}
		c.mu.Lock()
		for k, t := range m {
			c.since[k] = t
		}
		c.mu.Unlock()
		logf.FromContext(ctx).Info("Recorded when configstamp began to cover", "registration", c.registration, "covered", keys, "since", now.UTC().Format(time.RFC3339))
		return true, nil
	})
}

// coverageRunnable writes the coverage of keys once, on the leader.
type coverageRunnable struct {
	c    *coverage
	keys []string
}

func (r coverageRunnable) Start(ctx context.Context) error {
	if err := r.c.ensure(ctx, r.keys...); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}
