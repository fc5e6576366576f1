package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// The roles of the one binary (--role). The webhook serves admission on every replica
// and elects no leader; the watcher runs the leader-elected controllers and serves no
// webhook; all is both in one process (dev mode, make demo, a single-Deployment
// install), where losing the lease ends the process and so its admission too.
const (
	roleAll     = "all"
	roleWebhook = "webhook"
	roleWatcher = "watcher"
)

// serves reports whether the role serves admission.
func (o *options) serves() bool { return o.role != roleWatcher }

// watches reports whether the role runs the watcher.
func (o *options) watches() bool { return o.role != roleWebhook }

// validateRole checks --role against the flags that belong to one role alone.
func (o *options) validateRole() error {
	switch o.role {
	case roleAll:
		return nil
	case roleWebhook:
		if o.leaderElect {
			return errors.New("--role webhook elects no leader (every replica serves admission): drop --leader-elect")
		}
		return nil
	case roleWatcher:
		if o.devWebhookURL != "" || o.certs.enabled() || o.webhookClientCA != "" || len(o.watcherUsers) > 0 {
			return errors.New("--role watcher serves no webhook: --dev-webhook-url, --self-signed-secret, --tls-secret, --webhook-client-ca-file and --watcher-user are the webhook role's")
		}
		return nil
	}
	return fmt.Errorf("--role %q: want webhook, watcher or all", o.role)
}

// cacheSynced is the watcher role's readiness: every informer its cache holds has
// synced (a standby's too: the cache runs on every replica, so a standby that takes the
// lease over starts from a synced cache).
func cacheSynced(c cache.Cache) func(*http.Request) error {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), 200*time.Millisecond)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("the watch caches have not synced")
		}
		return nil
	}
}
