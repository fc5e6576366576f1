package main

import (
	"flag"
	"os"
	"runtime/debug"
	"strconv"

	"github.com/go-logr/logr"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/webhook"
)

// boundsOptions bound the work of one admission and of all of them.
type boundsOptions struct {
	maxSources      int
	maxRequestBytes int64
	maxInFlight     int
	// maxNudges bounds the watcher's writes through the webhook (0: half maxInFlight).
	maxNudges    int
	webhookQPS   float64
	webhookBurst int
	// digestCacheEntries bounds each process's digest cache (digestCacheSize).
	digestCacheEntries int
}

// Default client-side budget of the webhook's reads, apart from the watcher's
// (--kube-api-qps). A review reads its sources, an unchanged one by its metadata only;
// 20 writers at once on two cores took about 440 reads a second (BENCHMARKS.md), which
// this leaves unthrottled, while one replica cannot be made to send etcd more than 500.
// Past the budget a read waits within --read-timeout, then the review keeps the stored
// stamp (read_error).
const (
	defaultWebhookQPS   = 500
	defaultWebhookBurst = 1000
)

func (b *boundsOptions) bind(fs *flag.FlagSet) {
	fs.IntVar(&b.maxSources, "max-sources", stamp.DefaultMaxSources, "Most ConfigMaps and Secrets one workload may consume and be stamped. Past it the webhook reads nothing and keeps the stored stamp (a warning), and the watcher reports it (Event TooManySources).")
	fs.Int64Var(&b.maxRequestBytes, "webhook-max-request-bytes", webhook.DefaultMaxRequestBytes, "Largest admission request body read; a larger one is answered 413 unread, and the API server admits it unstamped (failurePolicy Ignore). Default 4 MiB: a review of two objects at etcd's 1.5 MiB limit.")
	fs.IntVar(&b.digestCacheEntries, "digest-cache-entries", digestCacheSize, "Most sources whose digests each process remembers (each ConfigMap or Secret by the keys consumed; about 600 bytes an entry). A source remembered is checked by a metadata-only read, one past them by reading its whole content: keep it above the sources a fan-out or a rollout of every workload reads again (50,000: about 30 MiB). At least 1.")
	fs.IntVar(&b.maxInFlight, "webhook-max-in-flight", webhook.DefaultMaxInFlight, "Most admission requests read or handled at once per replica (Jobs' at most half of them); one that finds no slot within a second is answered 429 unread, and the API server admits it unstamped. A body must arrive within 2 s of its headers, so a slow sender cannot hold a slot longer.")
	fs.IntVar(&b.maxNudges, "max-nudges-in-flight", 0, "Most of the watcher's writes through the webhook (nudges and records) in flight at once, all workload kinds together; 0: half of --webhook-max-in-flight. Keep it below --webhook-max-in-flight: the Service may send them all to one replica, whose admissions without a slot are answered 429 and admitted unstamped.")
	fs.Float64Var(&b.webhookQPS, "webhook-api-qps", defaultWebhookQPS, "Client-side rate limit of the webhook's reads, per second, apart from --kube-api-qps. A read that cannot start within --read-timeout leaves the stored stamp (result read_error).")
	fs.IntVar(&b.webhookBurst, "webhook-api-burst", defaultWebhookBurst, "Client-side burst of the webhook's reads.")
}

// memoryLimitEnv is the container's memory limit in bytes, which the chart sets from
// resources.limits.memory (a resourceFieldRef).
const memoryLimitEnv = "CONFIGSTAMP_MEMORY_LIMIT"

// setMemoryLimit sets the Go runtime's soft memory limit to 80% of the container's,
// unless GOMEMLIMIT sets one: the collector then works harder near the limit rather than
// let the heap grow into an OOM kill. The rest is room for what the runtime does not
// count (stacks of threads, the binary, memory not yet returned): at 90% a flood at
// capacity (test/security FloodAtCapacity) once peaked at 256.7 MiB resident against
// the chart's 256 Mi limit.
func setMemoryLimit(log logr.Logger) {
	v := os.Getenv(memoryLimitEnv)
	if v == "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	limit, err := strconv.ParseInt(v, 10, 64)
	if err != nil || limit <= 0 {
		log.Info("Ignored "+memoryLimitEnv+": not a number of bytes", "value", v)
		return
	}
	debug.SetMemoryLimit(limit / 10 * 8)
	log.Info("Set the Go memory limit", "bytes", limit/10*8, "containerLimit", limit)
}

// watcherGCPercent is the watcher role's GOGC. Its heap is mostly its cache, live for
// the process's life: at the default 100 the runtime lets the heap grow to twice that
// before collecting, and keeps about as much from the OS. At 30 the collector runs
// about three times as often while the watcher allocates (checks, events, a re-check
// pass); at rest it costs nothing, and the heap is held to 1.3 times the cache: at
// 10,000 workloads the peak while the creates were checked measured 93.6 MiB instead of
// 103.3 at 50, for 31.2 s of CPU instead of 24.4 (BENCHMARKS.md, "Memory in the number
// of workloads").
const watcherGCPercent = 30

// webhookGCPercent is the webhook role's GOGC: its live heap is small (the digest
// cache, the in-flight reviews), so at 100 a burst of reviews doubles it; at 50 the
// peak of a burst is lower for a collection about twice as often while reviews run.
const webhookGCPercent = 50

// setGCPercent sets the collector's target for the role, unless GOGC is set: the
// watcher's (watcherGCPercent), the webhook's (webhookGCPercent); all's stays at the
// runtime's default.
func setGCPercent(role string, log logr.Logger) {
	gogc := map[string]int{roleWatcher: watcherGCPercent, roleWebhook: webhookGCPercent}[role]
	if gogc == 0 || os.Getenv("GOGC") != "" {
		return
	}
	debug.SetGCPercent(gogc)
	log.Info("Set the Go collector's target", "gogc", gogc, "role", role)
}

// nudgesInFlight is the watcher's bound on its writes through the webhook: half a
// replica's slots unless set, so users' admissions find the other half free.
func (b *boundsOptions) nudgesInFlight() int {
	if b.maxNudges > 0 {
		return b.maxNudges
	}
	return max(1, b.maxInFlight/2)
}
