package decide

import (
	"errors"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// Writes is what the sources' metadata says about when the config was last written.
type Writes struct {
	// Newer: a source was written at or after the time asked about, or deleted since
	// the stamp.
	Newer bool
	// Latest is the last write of the sources read (zero: none read).
	Latest time.Time
	// Deleted: a source the stamp saw present does not exist now.
	Deleted bool
}

// Written reads when the sources were last written, relative to since (the API server's
// times have one-second resolution: a tie counts as newer, so a change is never lost).
// meta returns a source's metadata, nil when it does not exist, or an error (ErrUnknown:
// not readable, the others are still read).
// A source missing now counts as newer only when the stored stamp's sources annotation
// (storedSources) shows it present: it was deleted since (a deletion carries no time).
// A source the stored stamp did not count (Secrets were off) or saw missing too, and a
// source annotated configstamp.io/ignore, give no evidence.
// A required source (its pods cannot start without it) never written since its creation
// (its last write is its creation time), created no later than since (when the pods of
// the current template began: their ReplicaSet's creation, not the workload's, which can
// adopt older ReplicaSets), gives no evidence either, even at a tie of the times: every
// such pod started once it existed and read the one content it has had. (A tie of
// one-second times otherwise counts as newer: a release that applies a ConfigMap and its
// Deployment in one go, while the webhook is unreachable, would roll every such workload
// once for nothing.)
// The error is ErrUnknown when a source could not be read and none was newer.
// With all false it stops at the first newer source, as the watcher does: no more
// reads than the answer needs, and a later source's error does not undo it; with all
// true it reads every source, for Latest.
func Written(refs []stamp.Source, storedSources string, since time.Time, all bool, meta func(stamp.Source) (metav1.Object, error)) (Writes, error) {
	stored := stamp.ParseSources(storedSources)
	var w Writes
	unknown := false
	for _, src := range refs {
		if w.Newer && !all {
			break
		}
		m, err := meta(src)
		switch {
		case errors.Is(err, ErrUnknown):
			unknown = true
			continue
		case err != nil:
			return Writes{}, err
		case m == nil:
			if d, ok := stored[src.ID()]; ok && d != "missing" {
				w.Deleted, w.Newer = true, true
			}
			continue
		case stamp.IsTrue(m.GetAnnotations()[stamp.IgnoreAnnotation]):
			continue
		}
		last := workload.LastWrite(m)
		if last.After(w.Latest) {
			w.Latest = last
		}
		if !last.Before(since) && !oneContentSince(src, m, last, since) {
			w.Newer = true
		}
	}
	if unknown && !w.Newer {
		return w, ErrUnknown
	}
	return w, nil
}

// CreatedCovered reports whether a workload created at created was created while the
// registration already sent its admissions to configstamp, so it should have been
// stamped at creation: after configstamp began to cover its kind (kindSince) and, when
// it consumes a Secret, Secrets (secretsSince), and not before its namespace's last
// write (nsWritten: the opt-in label). Zero coverage times mean not covered. A
// workload that predates either is one configstamp was installed over.
//
// The times have one-second resolution. A tie with the coverage counts as predating: a
// workload created as configstamp was being installed was admitted without a stamp,
// and its new pods read the config as it was then. A tie with the namespace's last
// write counts as after: a namespace is written when it is created, often with its
// label, just before its workloads.
func CreatedCovered(created, kindSince, secretsSince time.Time, hasSecrets bool, nsWritten time.Time) bool {
	if kindSince.IsZero() || hasSecrets && secretsSince.IsZero() {
		return false
	}
	covered := kindSince
	if hasSecrets && secretsSince.After(covered) {
		covered = secretsSince
	}
	return created.After(covered) && !created.Before(nsWritten)
}

// Coverage is what the registration and the namespace tell of an unstamped workload.
type Coverage struct {
	// Bypassed: it was created while configstamp covered it (CreatedCovered), so it
	// should have been stamped at creation.
	Bypassed bool
	// Since is when configstamp began to cover it, as far as the times tell (zero: not
	// covered): the latest of its kind's coverage, Secrets' (when it consumes one) and
	// its namespace's last write (the opt-in label); for a workload opted in by its own
	// label, its own last write instead of the namespace's (the label's time is not
	// known; its last write is no earlier). A source written after Since was written
	// while configstamp watched the workload.
	Since time.Time
}

// Covered is Evidence.Coverage of an unstamped workload obj that consumes refs, from
// since when its kind (kindSince) and Secrets (secretsSince) are covered (zero: not
// covered). namespace is read only when it is covered: the workload's namespace (nil:
// none) and whether it opts in. A workload opted in by its own label alone is never
// Bypassed: nothing tells when the label was added, so it is taken as installed over.
func Covered(obj metav1.Object, refs []stamp.Source, kindSince, secretsSince time.Time, namespace func() (ns metav1.Object, included bool, err error)) (Coverage, error) {
	hasSecrets := stamp.HasSecrets(refs)
	if kindSince.IsZero() || hasSecrets && secretsSince.IsZero() {
		return Coverage{}, nil
	}
	since := kindSince
	if hasSecrets && secretsSince.After(since) {
		since = secretsSince
	}
	ns, included, err := namespace()
	if err != nil {
		return Coverage{}, err
	}
	if ns == nil || !included {
		return Coverage{Since: later(since, workload.LastWrite(obj))}, nil
	}
	nsWritten := workload.LastWrite(ns)
	created := obj.GetCreationTimestamp().Time
	return Coverage{
		Bypassed: CreatedCovered(created, kindSince, secretsSince, hasSecrets, nsWritten),
		Since:    later(since, nsWritten),
	}, nil
}

// WrittenAfter is the time Evidence.ConfigNewer is asked about for config written after
// t: the next second (the API server's times have one-second resolution; a write in
// the same second as t counts as before it).
func WrittenAfter(t time.Time) time.Time {
	return t.Truncate(time.Second).Add(time.Second)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// oneContentSince reports whether src, whose metadata is m and last write last, is
// required and has had one content since no later than since.
func oneContentSince(src stamp.Source, m metav1.Object, last, since time.Time) bool {
	born := m.GetCreationTimestamp().Time
	return src.Required && last.Equal(born) && !born.After(since)
}
