package watcher

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/internal/decide"
	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// coverageInterval is how often the leader checks the registration's coverage entries
// (they are lost when the registration is replaced whole: helm upgrade --force,
// kubectl replace).
const coverageInterval = 30 * time.Second

// coverage says since when configstamp has stamped each workload kind and counted
// Secrets, on the API server's clock, so that evidence can tell a workload that should
// have been stamped at creation (the webhook was bypassed) from one that was not
// covered then. Deployments have been stamped by every version: since the registration's
// creation. The other kinds and Secrets came later, and an upgrade keeps the
// registration: their times are kept in its CoverageAnnotation, written by the leader
// when it first covers them (for a kind, once the registration has its entries), put back
// from memory when the registration is replaced whole, and removed when they are no
// longer covered. A time is never before the registration's creation. Unknown (no entry,
// no registration, no access): every unstamped workload counts as installed over.
// A namespaced install keeps them in a ConfigMap instead (coverageRecord), with since
// when each namespace is watched (decide.CoverageNamespace): an added namespace rolls
// nothing, as a namespace's opt-in does not.
type coverage struct {
	live      client.Reader
	writer    client.Client
	record    coverageRecord
	serverNow func(context.Context) (time.Time, error)

	mu sync.Mutex
	// wanted are the keys this process covers (a kind detected later is added).
	wanted map[string]bool
	// uid and since are the registration and the entries last read or written.
	uid   types.UID
	since map[string]time.Time
	// wake asks maintain to check at once (a key was added).
	wake chan struct{}
}

func newCoverage(live client.Reader, writer client.Client, record coverageRecord, serverNow func(context.Context) (time.Time, error)) *coverage {
	return &coverage{live: live, writer: writer, record: record, serverNow: serverNow,
		wanted: map[string]bool{}, wake: make(chan struct{}, 1)}
}

// coverageRecord is the object coverage is kept on: the registration, or in a
// namespaced install (which may read nothing cluster-wide) a ConfigMap in configstamp's
// namespace that the chart creates with the registration, standing for it.
type coverageRecord struct {
	key client.ObjectKey
	// new is an empty object of the record's type, to read into and to patch.
	new func() client.Object
	// registers reports whether the registration sends admissions of resource.
	registers func(obj client.Object, resource string) bool
}

// registrationRecord keeps coverage on the registration named name.
func registrationRecord(name string) coverageRecord {
	return coverageRecord{key: client.ObjectKey{Name: name},
		new: func() client.Object { return &admissionregistrationv1.MutatingWebhookConfiguration{} },
		registers: func(obj client.Object, resource string) bool {
			return registers(obj.(*admissionregistrationv1.MutatingWebhookConfiguration), resource)
		}}
}

// configMapRecord keeps coverage on the metadata of the ConfigMap key, created by the
// chart in the same release as the registration, for the same kinds as this process.
func configMapRecord(key client.ObjectKey) coverageRecord {
	return coverageRecord{key: key,
		new:       func() client.Object { return configread.NewMeta(stamp.KindConfigMap) },
		registers: func(client.Object, string) bool { return true }}
}

func (r coverageRecord) String() string {
	if r.key.Namespace != "" {
		return "configmap " + r.key.String()
	}
	return "registration " + r.key.Name
}

// cover adds keys to what this process covers and has them written soon.
func (c *coverage) cover(keys ...string) {
	c.mu.Lock()
	for _, k := range keys {
		c.wanted[k] = true
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// ofAll returns since when each key has been covered (zero: unknown), from one live read
// of the registration.
func (c *coverage) ofAll(ctx context.Context, keys ...string) ([]time.Time, error) {
	out := make([]time.Time, len(keys))
	reg, err := c.get(ctx)
	if err != nil || reg == nil {
		return out, err
	}
	m := entries(ctx, reg)
	for i, k := range keys {
		out[i] = decide.CoveredSince(reg.GetCreationTimestamp().Time, m, k)
		if _, ok := m[k]; !ok && decide.IsCoverageScope(k) && !decide.ScopeSince(m).IsZero() {
			// Another scope's entry: the scope changed, and the leader has not yet
			// written since when: not known until it has.
			return out, fmt.Errorf("the %s's coverage of this scope is not written yet: %w", c.record, decide.ErrUnknown)
		}
	}
	return out, nil
}

func (c *coverage) get(ctx context.Context) (client.Object, error) {
	reg := c.record.new()
	err := c.live.Get(ctx, c.record.key, reg)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", c.record, err)
	}
	return reg, nil
}

// entries reads the record's CoverageAnnotation (decide.ParseCoverage); an unreadable
// one counts as empty, and is written afresh.
func entries(ctx context.Context, reg client.Object) map[string]time.Time {
	m, err := decide.ParseCoverage(reg.GetAnnotations()[stamp.CoverageAnnotation])
	if err != nil {
		logf.FromContext(ctx).Info("Ignored an unreadable coverage annotation on the registration", "registration", reg.GetName(), "error", err.Error())
	}
	return m
}

// registers reports whether the registration sends admissions of resource.
func registers(reg *admissionregistrationv1.MutatingWebhookConfiguration, resource string) bool {
	for _, w := range reg.Webhooks {
		for _, r := range w.Rules {
			if slices.Contains(r.Resources, resource) {
				return true
			}
		}
	}
	return false
}

// sourceCoverage reports whether key is a source kind's (Secrets'): those need no
// registration rule.
func sourceCoverage(key string) bool {
	return key != "" && slices.ContainsFunc(stamp.SourceKinds(), func(k *stamp.SourceKind) bool { return k.Coverage == key })
}

// sync brings the registration's entries in line with what this process covers: a
// missing entry gets the time remembered for this registration, or now; an entry for
// something no longer covered (Secrets or Rollouts turned off) is removed.
// pending is true when a key waits for the registration (to exist, or to send its
// kind's admissions).
func (c *coverage) sync(ctx context.Context) (pending bool, err error) {
	reg, err := c.get(ctx)
	if err != nil || reg == nil {
		return reg == nil, err
	}
	have := entries(ctx, reg)
	c.mu.Lock()
	wanted := maps.Clone(c.wanted)
	remembered := map[string]time.Time{}
	if c.uid == reg.GetUID() {
		remembered = maps.Clone(c.since)
	}
	c.mu.Unlock()
	want := map[string]time.Time{}
	var now time.Time
	for k := range wanted {
		if k == workload.Deployment.Resource {
			continue // since the registration's creation, always
		}
		if !sourceCoverage(k) && !decide.IsCoverageScope(k) && !c.record.registers(reg, k) {
			pending = true
			continue // not until the registration sends its admissions
		}
		switch t, ok := have[k]; {
		case ok:
			want[k] = t
		case !remembered[k].IsZero():
			want[k] = remembered[k]
		case decide.IsCoverageScope(k) && decide.ScopeSince(have).IsZero():
			// No scope recorded (a first install, or an upgrade from a version that
			// kept none): taken as the scope since the registration's creation, as
			// before; only a later change of it counts.
			want[k] = reg.GetCreationTimestamp().UTC()
		default:
			if now.IsZero() {
				if now, err = c.serverNow(ctx); err != nil {
					return pending, fmt.Errorf("read the API server's clock: %w", err)
				}
				now = now.UTC().Truncate(time.Second)
			}
			want[k] = now
		}
	}
	if !maps.Equal(want, have) {
		var value *string // null removes the annotation
		if len(want) > 0 {
			value = new(decide.FormatCoverage(want))
		}
		// Conditional on what was read: no concurrent write is lost.
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": reg.GetResourceVersion(), "annotations": map[string]*string{stamp.CoverageAnnotation: value}}})
		target := c.record.new()
		target.SetNamespace(c.record.key.Namespace)
		target.SetName(c.record.key.Name)
		if err := c.writer.Patch(ctx, target, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return pending, fmt.Errorf("write the coverage of %s: %w", c.record, err)
		}
		logf.FromContext(ctx).Info("Recorded since when configstamp covers each kind", "record", c.record.String(), "coveredSince", want)
	}
	c.mu.Lock()
	c.uid, c.since = reg.GetUID(), want
	c.mu.Unlock()
	return pending, nil
}

// NeedLeaderElection: only the leader writes coverage (it runs the watcher whose
// coverage it is).
func (c *coverage) NeedLeaderElection() bool { return true }

// Start keeps the registration's coverage in line until ctx ends.
func (c *coverage) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("coverage")
	t := time.NewTicker(coverageInterval)
	defer t.Stop()
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
		case <-t.C:
		case <-retry.C:
		}
		pending, err := c.sync(ctx)
		switch {
		case apierrors.IsConflict(err):
			retry.Reset(100 * time.Millisecond)
		case err != nil:
			log.Error(err, "Could not keep the registration's coverage; evidence takes unstamped workloads of uncovered kinds as installed over until it can")
			retry.Reset(2 * time.Second)
		case pending:
			retry.Reset(2 * time.Second)
		}
	}
}
