package watcher

import (
	"context"
	"slices"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// The API server passes an admission webhook's warnings to the client that made the
// request (Warning headers). A nudge's warnings tell why the webhook did not stamp it:
// the watcher collects those of each nudge through its context.

type warningsKey struct{}

// warnings collects the warnings of the requests made with one context.
type warnings struct {
	mu    sync.Mutex
	texts []string
}

// collectWarnings returns a context whose requests' warnings w collects.
func collectWarnings(ctx context.Context) (context.Context, *warnings) {
	w := &warnings{}
	return context.WithValue(ctx, warningsKey{}, w), w
}

// addWarning records a warning of a request made with ctx (a no-op when nothing
// collects them).
func addWarning(ctx context.Context, text string) {
	if w, ok := ctx.Value(warningsKey{}).(*warnings); ok {
		w.mu.Lock()
		w.texts = append(w.texts, text)
		w.mu.Unlock()
	}
}

// has reports whether a warning starts with prefix.
func (w *warnings) has(prefix string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.ContainsFunc(w.texts, func(t string) bool { return strings.HasPrefix(t, prefix) })
}

// WarningHandler records the API server's warnings for the watcher (its nudges) and
// logs them as controller-runtime's clients do by default: set it as the
// WarningHandlerWithContext of the rest.Config the manager is made from.
func WarningHandler() rest.WarningHandlerWithContext {
	return warningHandler{next: log.NewKubeAPIWarningLogger(log.KubeAPIWarningLoggerOptions{})}
}

type warningHandler struct {
	next rest.WarningHandlerWithContext
}

func (h warningHandler) HandleWarningHeaderWithContext(ctx context.Context, code int, agent, text string) {
	if code == 299 { // a warning (RFC 7234), the only code the API server sends
		addWarning(ctx, text)
	}
	h.next.HandleWarningHeaderWithContext(ctx, code, agent, text)
}
