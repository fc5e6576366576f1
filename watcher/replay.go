package watcher

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// replayMargin widens the replay window before the moment this replica started to
// watch, for the API server's one-second time resolution and event delivery.
const replayMargin = 10 * time.Second

// replayWindow decides which ConfigMaps of the watch's initial list were written since
// this replica started watching them (it became leader). It takes that moment from the
// API server's clock, the clock of the managed-fields times it is compared with, at the
// first event: the watch starts only under leadership.
type replayWindow struct {
	serverNow func(context.Context) (time.Time, error)

	once  sync.Once
	since time.Time
}

func (w *replayWindow) recent(ctx context.Context, obj client.Object) bool {
	w.once.Do(func() {
		now, err := w.serverNow(ctx)
		if err != nil {
			logf.FromContext(ctx).Error(err, "Could not read the API server's clock; using the local one for the start-up replay window")
			now = time.Now()
		}
		w.since = now.Add(-replayMargin)
	})
	return !lastWrite(obj).Before(w.since)
}

// serverClock reads the API server's time from the Date header of a GET /version.
func serverClock(hc *http.Client, host string) func(context.Context) (time.Time, error) {
	return func(ctx context.Context) (time.Time, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(host, "/")+"/version", nil)
		if err != nil {
			return time.Time{}, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return time.Time{}, err
		}
		_ = resp.Body.Close() // only the Date header is read
		t, err := http.ParseTime(resp.Header.Get("Date"))
		if err != nil {
			return time.Time{}, fmt.Errorf("date header %q of GET /version: %w", resp.Header.Get("Date"), err)
		}
		return t, nil
	}
}
