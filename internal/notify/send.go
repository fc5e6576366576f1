package notify

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// errPermanent marks an answer not worth retrying (a 4xx other than 408 and 429).
var errPermanent = errors.New("refused")

// deliver sends m, retrying a failed try (a network error, a timeout, a 5xx, a 408 or a
// 429) up to MaxAttempts tries in all, with a backoff doubled each time. Every try
// sends the same body (one CloudEvents id), so a receiver can tell a retry.
func (n *Notifier) deliver(ctx context.Context, m message) error {
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	f, _ := formatter(n.o.Format)
	contentType, body, err := render(f, m, n.o.Source, hex.EncodeToString(id))
	if err != nil {
		return err
	}
	wait := n.o.Backoff
	for attempt := 1; ; attempt++ {
		err = n.post(ctx, contentType, body)
		if err == nil || errors.Is(err, errPermanent) || attempt >= n.o.MaxAttempts {
			return err
		}
		retries.Inc()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// render renders m within maxBody: the last workloads listed are left out, counted,
// until it fits (one workload always fits: its reason is clipped to maxReason).
func render(f format, m message, source, id string) (string, []byte, error) {
	for {
		contentType, body, err := f(m, source, id)
		if err != nil || len(body) <= maxBody || len(m.events) <= 1 {
			return contentType, body, err
		}
		drop := max(len(m.events)/4, 1)
		m.events, m.more = m.events[:len(m.events)-drop], m.more+drop
	}
}

// post makes one try. Its error names the status, never the URL (it is a secret).
func (n *Notifier) post(ctx context.Context, contentType string, body []byte) error {
	url, err := n.o.URL(ctx)
	if err != nil {
		return fmt.Errorf("read the notification URL: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, n.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("notification URL: %w", errPermanent)
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := n.o.Client.Do(req)
	if err != nil {
		// The error of a request names its URL: leave it out.
		var uerr interface{ Timeout() bool }
		if errors.As(err, &uerr) && uerr.Timeout() {
			return errors.New("post: timed out")
		}
		return errors.New("post: the receiver did not answer")
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode < 300:
		return nil
	case resp.StatusCode < 400:
		// Redirects are not followed (noRedirects).
		return fmt.Errorf("post: the receiver answered %s, a redirect (not followed): %w", resp.Status, errPermanent)
	case resp.StatusCode >= 500, resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode == http.StatusTooManyRequests:
		return fmt.Errorf("post: the receiver answered %s", resp.Status)
	}
	return fmt.Errorf("post: the receiver answered %s: %w", resp.Status, errPermanent)
}
