package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/webhook"
)

// audited asserts the audit trail of one stamp change of ns/name from oldHash to
// newHash made by user: the API server's audit log carries the webhook's config-hash
// audit annotation for the request, and configstamp's log names the Deployment, the user
// and old -> new.
func audited(t *testing.T, ns, name, user, oldHash, newHash string) {
	t.Helper()
	framework.Eventually(t, 20*time.Second, "API server audit event for "+name+" "+short(newHash), func() error {
		return findAudit(ns, name, user, newHash)
	})
	framework.Eventually(t, 10*time.Second, "configstamp audit line for "+name, func() error {
		var seen []string
		for _, rec := range cs.StampLines(ns, name) {
			if rec["user"] == user && rec["oldHash"] == oldHash && rec["newHash"] == newHash {
				return nil
			}
			seen = append(seen, fmt.Sprintf("%v %v %s->%s", rec["operation"], rec["user"], short(fmt.Sprint(rec["oldHash"])), short(fmt.Sprint(rec["newHash"]))))
		}
		return fmt.Errorf("no line by %s %s -> %s; saw %v", user, short(oldHash), short(newHash), seen)
	})
}

func findAudit(ns, name, user, hash string) error {
	raw, err := os.ReadFile(env.Cluster.AuditLog)
	if err != nil {
		return err
	}
	key := webhook.EntryName + "/" + webhook.AuditHash
	for _, line := range bytes.Split(raw, []byte("\n")) {
		if !bytes.Contains(line, []byte(hash)) {
			continue
		}
		var ev struct {
			User        struct{ Username string }
			ObjectRef   struct{ Namespace, Name, Resource string }
			Annotations map[string]string
		}
		if json.Unmarshal(line, &ev) == nil && ev.ObjectRef.Resource == "deployments" && ev.ObjectRef.Namespace == ns &&
			ev.ObjectRef.Name == name && ev.User.Username == user && ev.Annotations[key] == hash {
			return nil
		}
	}
	return fmt.Errorf("no audit event by %s on deployments %s/%s with %s=%s", user, ns, name, key, hash)
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
