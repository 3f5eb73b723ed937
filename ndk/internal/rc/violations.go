package rc

import (
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/ndkxdp/ndkxdp/rocev2"
)

// Access violations per source. A wrong R_Key costs the requester its
// connection (the remote access error NAK moves both QPs to error), so a
// key-guessing peer makes one guess per connection; opening connections
// is its only way to guess faster (ReDMArk). The engine therefore counts
// the violations of each source address in a token bucket: a source that
// spends its burst has its requests that carry a token (READ, the first or
// only packet of a WRITE, atomics, the SEND that invalidates) dropped
// before any token is looked at, on every connection, until the bucket
// refills. A violation is a remote access error NAK, or a SEND with
// Invalidate of a token the QP may not invalidate (an invalid request NAK
// by the specification, but a guess at a key all the same). A dropped request is
// a lost packet to the requester, which retransmits; so a well-behaved
// QP from that address is delayed, never failed, and a guesser learns
// nothing from the drops (no NAK, no ACK).
//
// The table is bounded: violationSources entries, each a fixed size, in
// an array the engine owns (no allocation). When it is full, a new source
// takes the entry of the source whose last violation is oldest among
// those not over their limit (every entry over its limit is a source
// still being limited, which is worth keeping); with all of them limited
// it takes the oldest. The bucket is per engine: an adapter with several
// queues allows a source its burst on each.
const (
	violationSources = 256
	// violationBurst is how many violations a source may make at once: a
	// buggy consumer's few stale tokens never trip it.
	violationBurst = 16
	// violationRefill is the time one violation's allowance takes to
	// come back: 4 a second per source, 240 a minute at most.
	violationRefill = int64(250 * time.Millisecond)
)

// accessViolation counts a request of the current packet's source that
// named a memory token it may not use.
func (e *Engine) accessViolation() {
	atomic.AddUint64(&e.c.AccessViolations, 1)
	e.violations.note(e.pkt.IP.Src.Unmap(), e.now)
}

// keyed are the headers that carry a memory token the responder checks:
// the requests a source over its limit may not make.
const keyed = rocev2.HasRETH | rocev2.HasAtomicETH | rocev2.HasIETH

type violationSource struct {
	src netip.Addr
	// count is every violation the source made; limited every request of
	// it dropped for being over the limit.
	count, limited uint64
	// credit is the bucket, in nanoseconds of refill time: a violation
	// costs violationRefill, the bucket holds violationBurst of them, and
	// it refills with the engine clock.
	credit int64
	last   int64 // engine clock at the last refill
}

type violationTable struct {
	entries [violationSources]violationSource
	n       int
	// over counts the entries whose bucket was empty when last updated:
	// while it is zero, requests are not looked up at all.
	over int
}

func (s *violationSource) refill(now int64) {
	s.credit = min(s.credit+now-s.last, violationBurst*violationRefill)
	s.last = now
}

func (s *violationSource) empty() bool { return s.credit < violationRefill }

func (v *violationTable) find(src netip.Addr) *violationSource {
	for i := range v.entries[:v.n] {
		if v.entries[i].src == src {
			return &v.entries[i]
		}
	}
	return nil
}

// update refills s and keeps over in step with its state.
func (v *violationTable) update(s *violationSource, now int64) {
	was := s.empty()
	s.refill(now)
	if was && !s.empty() {
		v.over--
	}
}

// note records a violation by src at now.
func (v *violationTable) note(src netip.Addr, now int64) {
	s := v.find(src)
	if s == nil {
		s = v.claim(now)
		*s = violationSource{src: src, credit: violationBurst * violationRefill, last: now}
	} else {
		v.update(s, now)
	}
	s.count++
	if !s.empty() {
		s.credit -= violationRefill
		if s.empty() {
			v.over++
		}
	}
}

// claim returns an entry for a new source, evicting one when full.
func (v *violationTable) claim(now int64) *violationSource {
	if v.n < len(v.entries) {
		v.n++
		return &v.entries[v.n-1]
	}
	victim := -1
	for i := range v.entries {
		s := &v.entries[i]
		v.update(s, now)
		if s.empty() {
			continue
		}
		if victim < 0 || s.last < v.entries[victim].last {
			victim = i
		}
	}
	if victim < 0 {
		victim = 0
		for i := range v.entries {
			if v.entries[i].last < v.entries[victim].last {
				victim = i
			}
		}
		v.over-- // a limited source leaves
	}
	return &v.entries[victim]
}

// limited reports whether a request from src must be dropped, and counts
// it when so.
func (v *violationTable) limited(src netip.Addr, now int64) bool {
	s := v.find(src)
	if s == nil {
		return false
	}
	v.update(s, now)
	if !s.empty() {
		return false
	}
	s.limited++
	return true
}

// ViolationSource is one source's line in ViolationSources.
type ViolationSource struct {
	Source     netip.Addr
	Violations uint64 // remote access error NAKs its requests caused
	Dropped    uint64 // requests dropped while it was over its limit
	Limited    bool   // over its limit now
}

// ViolationSources returns the engine's table of sources that caused
// access violations (at most 256 entries, in no particular order).
func (e *Engine) ViolationSources() []ViolationSource {
	var out []ViolationSource
	read := func() {
		v := &e.violations
		for i := range v.entries[:v.n] {
			s := &v.entries[i]
			v.update(s, e.clock())
			out = append(out, ViolationSource{Source: s.src, Violations: s.count, Dropped: s.limited, Limited: s.empty()})
		}
	}
	if e.do(read) != nil {
		return nil
	}
	return out
}
