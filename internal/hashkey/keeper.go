package hashkey

import (
	"bytes"
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// DefaultRefresh is how often a Keeper reads the key Secret again.
const DefaultRefresh = 10 * time.Second

// MinReread is the least time between two reads of the key that Fresh starts.
const MinReread = time.Second

// Keeper holds the current key and reads the Secret again every Refresh (Ensure: a
// deleted Secret is re-created by whichever replica comes first), so that every replica
// converges on the key the Secret holds within about Refresh of a rotation, instead of
// replicas started at different times digesting with different keys. It runs on every
// replica: each serves admission.
type Keeper struct {
	Client  client.Client // uncached, as Ensure requires
	Ref     types.NamespacedName
	Refresh time.Duration

	mu  sync.RWMutex
	key []byte
	// read is when the read of the Secret that gave key started; tried when Fresh last
	// started a read (under mu).
	read, tried time.Time
	// reading is held by the one read Fresh runs at a time.
	reading sync.Mutex
}

var _ manager.LeaderElectionRunnable = &Keeper{}

// Load reads (or creates) the key once; call it before serving.
func (k *Keeper) Load(ctx context.Context) error {
	started := time.Now()
	key, err := Ensure(ctx, k.Client, k.Ref)
	if err != nil {
		return err
	}
	k.set(ctx, key, started)
	return nil
}

// Key returns the current key (nil before Load).
func (k *Keeper) Key() []byte {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.key
}

// set takes key, read by a read that started at started (a later read may have
// finished first: the key of the read started last is kept).
func (k *Keeper) set(ctx context.Context, key []byte, started time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if started.Before(k.read) {
		return
	}
	if k.key != nil && !bytes.Equal(k.key, key) {
		logf.FromContext(ctx).Info("The hash key changed; every stamp changes at its workload's next check", "secret", k.Ref.String())
	}
	k.key, k.read = key, started
}

// Fresh makes sure the key was read by a read of the Secret that started after since,
// reading it again if not, and reports whether it was: a replica that meets a record
// or a nudge made under another key reads its own again before it judges (its own may
// be the stale one). since is when the other key was known to be in use (a nudge's
// arrival; a record's write, a second after its workload's last write time): a read
// that started earlier, even a moment earlier, may predate the rotation. Records and
// nudges are anyone's to forge, so Fresh starts at most one read per MinReread, and none
// while one runs (TryLock: it never waits); one read answers every caller whose since
// it follows; false means the key may be stale and the caller retries later.
func (k *Keeper) Fresh(ctx context.Context, since time.Time) bool {
	if k.readAfter(since) {
		return true
	}
	if !k.reading.TryLock() {
		return false
	}
	defer k.reading.Unlock()
	k.mu.Lock()
	if k.read.After(since) {
		k.mu.Unlock()
		return true
	}
	if time.Since(k.tried) < MinReread {
		k.mu.Unlock()
		return false
	}
	k.tried = time.Now()
	started := k.tried
	k.mu.Unlock()
	key, err := Ensure(ctx, k.Client, k.Ref)
	if err != nil {
		logf.FromContext(ctx).Error(err, "Could not read the hash key again; keeping the current one", "secret", k.Ref.String())
		return false
	}
	k.set(ctx, key, started)
	return started.After(since)
}

func (k *Keeper) readAfter(since time.Time) bool {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.read.After(since)
}

// NeedLeaderElection is false: every replica digests Secrets.
func (k *Keeper) NeedLeaderElection() bool { return false }

// Start reads the key again every Refresh until ctx ends. A failed read keeps the
// current key.
func (k *Keeper) Start(ctx context.Context) error {
	refresh := k.Refresh
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	t := time.NewTicker(refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			started := time.Now()
			key, err := Ensure(ctx, k.Client, k.Ref)
			if err != nil {
				logf.FromContext(ctx).Error(err, "Could not read the hash key; keeping the current one", "secret", k.Ref.String())
				continue
			}
			k.set(ctx, key, started)
		}
	}
}
