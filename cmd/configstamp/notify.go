package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"golang.org/x/time/rate"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/hashkey"
	"github.com/configstamp/configstamp/internal/notify"
)

// notifyOptions are the flags of notifications (off unless a URL is named).
type notifyOptions struct {
	urlFile, urlSecret, urlKey, format, source string
	window                                     time.Duration
	rate                                       float64
	maxAttempts                                int
}

func (n *notifyOptions) bind(fs *flag.FlagSet) {
	fs.StringVar(&n.urlFile, "notify-url-file", "", "File holding the URL notifications are sent to (a mounted Secret's key; read again for every message). Empty, and no --notify-url-secret: notifications are off.")
	fs.StringVar(&n.urlSecret, "notify-url-secret", "", "NAMESPACE/NAME of a Secret whose --notify-url-key holds the URL notifications are sent to (read live for every message; needs get on it). Excludes --notify-url-file.")
	fs.StringVar(&n.urlKey, "notify-url-key", "url", "The key of --notify-url-secret that holds the URL.")
	fs.StringVar(&n.format, "notify-format", notify.FormatCloudEvents, "Format of notifications: "+strings.Join(notify.Formats, ", ")+" (CloudEvents 1.0 structured mode; a Slack incoming webhook's text; a Teams workflow's Adaptive Card).")
	fs.StringVar(&n.source, "notify-source", "configstamp", "The CloudEvents source attribute of notifications (e.g. the cluster's name).")
	fs.DurationVar(&n.window, "notify-batch-window", notify.DefaultWindow, "How long a notification waits after the latest workload one change rolled, so that one message lists them all (at most 6 windows from the first).")
	fs.Float64Var(&n.rate, "notify-rate", notify.DefaultRate, "Notification messages per second at most (a token bucket with a burst of 5).")
	fs.IntVar(&n.maxAttempts, "notify-max-attempts", notify.DefaultMaxAttempts, "Tries of one notification message at most (retried, with a backoff from 1s doubled each time, after a network error, a timeout, a 5xx, 408 or 429).")
}

func (n *notifyOptions) enabled() bool { return n.urlFile != "" || n.urlSecret != "" }

func (n *notifyOptions) validate() error {
	if n.urlFile != "" && n.urlSecret != "" {
		return errors.New("--notify-url-file and --notify-url-secret exclude each other")
	}
	if n.urlSecret != "" {
		if _, err := hashkey.ParseRef(n.urlSecret); err != nil {
			return fmt.Errorf("--notify-url-secret: want NAMESPACE/NAME: %w", err)
		}
	}
	if n.enabled() && (n.window <= 0 || n.rate <= 0 || n.maxAttempts <= 0) {
		return errors.New("--notify-batch-window, --notify-rate and --notify-max-attempts must be positive")
	}
	if !n.enabled() {
		return nil
	}
	_, err := notify.New(notify.Options{Format: n.format, URL: notify.URLFromFile("")})
	return err
}

// notifier is the notifier the flags ask for (nil: notifications off); r reads the
// URL's Secret.
func (n *notifyOptions) notifier(r client.Reader) (*notify.Notifier, error) {
	if !n.enabled() {
		return nil, nil
	}
	url := notify.URLFromFile(n.urlFile)
	if n.urlSecret != "" {
		ref, _ := hashkey.ParseRef(n.urlSecret)
		url = notify.URLFromSecret(r, ref, n.urlKey)
	}
	return notify.New(notify.Options{URL: url, Format: n.format, Source: n.source, Window: n.window,
		Rate: rate.Limit(n.rate), MaxAttempts: n.maxAttempts})
}

// access is the permission the URL's Secret needs (none without one).
func (n *notifyOptions) access() []access {
	if n.urlSecret == "" {
		return nil
	}
	ref, _ := hashkey.ParseRef(n.urlSecret)
	return []access{{"", "secrets", "get", ref.Name, ref.Namespace}}
}
