package certs

import (
	"crypto/x509"
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// caState is one CA's entry in CAsAnnotation.
type caState struct {
	Since   time.Time  `json:"since"`
	Retired *time.Time `json:"retired,omitempty"`
}

// bundleInput is what the bundle arithmetic reads: the registration as read, this
// process's memory of it, and what is to be trusted.
type bundleInput struct {
	entries   [][]byte             // each webhook entry's caBundle
	record    string               // the registration's CAsAnnotation
	known     map[string]time.Time // when this process last knew each CA (by fingerprint) to have joined
	want      []byte               // the trust bundle to publish (PEM)
	served    *x509.Certificate    // the CA of the certificate served (nil: none)
	now       time.Time
	retention time.Duration
}

// current is the registration's trust as nextBundle reads it.
type current struct {
	states   map[string]caState  // the record, its times clamped (see record)
	recorded bool                // a record was there
	inAll    []*x509.Certificate // valid CAs every entry trusts
	present  []*x509.Certificate // valid CAs any entry trusts
}

// nextBundle is publish's arithmetic, apart from I/O: the CAs the registration's bundle
// holds next and their record. Every wanted CA is in it; a CA trusted now but no longer
// wanted stays, marked retired, for the retention after it was first found so; expired
// CAs, wanted or not, leave. The order (newest first, then by fingerprint) is the same
// for every writer, so replicas with the same inputs write the same bytes.
//
// The served CA stays, retired if need be, whatever the entries and the record say
// (after a replace that emptied both, the pods still serve it); and a bundle counts as
// empty (an install: a CA joining it is trusted at once) only when nothing is served.
func nextBundle(in bundleInput) ([]*x509.Certificate, map[string]caState) {
	cur := in.read()
	next, states := []*x509.Certificate{}, map[string]caState{}
	for _, c := range parseCerts(in.want) {
		if !c.NotAfter.After(in.now) || contains(next, c) {
			continue
		}
		next = append(next, c)
		states[fingerprint(c)] = in.wanted(cur, c)
	}
	for _, c := range cur.present {
		if contains(next, c) {
			continue
		}
		if st, keep := in.retired(cur, c); keep {
			next = append(next, c)
			states[fingerprint(c)] = st
		}
	}
	slices.SortFunc(next, func(a, b *x509.Certificate) int {
		if c := b.NotBefore.Compare(a.NotBefore); c != 0 {
			return c
		}
		return strings.Compare(fingerprint(a), fingerprint(b))
	})
	return next, states
}

func (in bundleInput) read() current {
	cur := in.trusted()
	cur.states, cur.recorded = in.readRecord()
	return cur
}

// readRecord parses the record. A time ahead of now (an edit, a writer whose clock runs
// fast) counts as now; a join this process knows to be later (the record lost or
// edited) as that.
func (in bundleInput) readRecord() (map[string]caState, bool) {
	states := map[string]caState{}
	recorded := json.Unmarshal([]byte(in.record), &states) == nil && len(states) > 0
	for fp, st := range states {
		st.Since = later(minTime(st.Since, in.now), in.known[fp])
		if st.Retired != nil && st.Retired.After(in.now) {
			now := in.now
			st.Retired = &now
		}
		states[fp] = st
	}
	return states, recorded
}

// trusted is the valid CAs every entry and any entry trusts. The served CA, when no
// entry has it, counts as both: trusted until the replace, it keeps its record.
func (in bundleInput) trusted() current {
	var cur current
	for i, e := range in.entries {
		var valid []*x509.Certificate
		for _, c := range parseCerts(e) {
			if c.NotAfter.After(in.now) {
				valid = append(valid, c)
			}
		}
		if i == 0 {
			cur.inAll = slices.Clone(valid)
		} else {
			cur.inAll = slices.DeleteFunc(cur.inAll, func(c *x509.Certificate) bool { return !contains(valid, c) })
		}
		for _, c := range valid {
			if !contains(cur.present, c) {
				cur.present = append(cur.present, c)
			}
		}
	}
	if s := in.served; s != nil && s.NotAfter.After(in.now) && !contains(cur.present, s) {
		cur.present = append(cur.present, s)
		cur.inAll = append(cur.inAll, s)
	}
	return cur
}

// wanted is the record of c, a CA to trust.
func (in bundleInput) wanted(cur current, c *x509.Certificate) caState {
	fp := fingerprint(c)
	st, ok := cur.states[fp]
	switch {
	case !contains(cur.inAll, c):
		// Joining now (or again, or into an entry that lacked it); into an empty bundle
		// (an install) nothing was being called, so trusted from the start.
		st.Since = in.now
		if len(cur.present) == 0 {
			st.Since = time.Time{}
		}
	case !ok && !cur.recorded:
		// Trusted before any record (an earlier version, cert-manager's injector).
		st.Since = in.known[fp]
	case !ok:
		st.Since = later(in.now, in.known[fp])
	}
	// A CA named again stays retired until the retention has passed, so that writers
	// whose Secrets disagree (during a switch of certificate modes) do not undo each
	// other's marks on every pass.
	if st.Retired != nil && in.now.Sub(*st.Retired) >= in.retention {
		st.Retired = nil
	}
	return st
}

// retired is the record of c, a CA trusted now but no longer wanted, and whether it
// stays: it is retired from the first pass that finds it so, for the retention.
func (in bundleInput) retired(cur current, c *x509.Certificate) (caState, bool) {
	st := cur.states[fingerprint(c)] // not recorded: joined at a time not known (zero)
	if st.Retired == nil || st.Retired.After(in.now) {
		now := in.now
		st.Retired = &now
	}
	return st, in.now.Sub(*st.Retired) < in.retention
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func contains(cs []*x509.Certificate, c *x509.Certificate) bool {
	for _, o := range cs {
		if o.Equal(c) {
			return true
		}
	}
	return false
}
