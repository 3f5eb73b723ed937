package inproc

import (
	"net/netip"
	"time"
)

// madRate shares the CM among the peers that send it MADs. A peer that
// floods QP1 (REQs it never completes, say) makes the CM goroutine decode
// and answer each one; without a share per source that goroutine and the
// management engine spend a core on it, and every connection of the
// adapter runs on what is left (ndk TestFloodOfConnectRequests). Each
// source address has a token bucket of madBurst MADs refilled at madRate
// a second, far above what connection setup needs (three to five MADs a
// connection: at 10,000 connections a second a peer sends 50,000); MADs
// beyond it are dropped before they are queued, and counted with the
// queue's drops. The sender's CM retransmits a dropped REQ, REP or DREQ.
// A REQ costs reqCost, ten MADs: it is the one MAD that makes the CM
// work (find a listener, then refuse it with a REJ or hold a connection
// and a QP) without the peer holding anything, so a SYN flood's REQs cost
// the CM at most reqRate a second of it, a tenth of what other MADs may,
// where each MAD it answered and refused took CPU from the adapter's
// connections (ndk BenchmarkFloodRatio/connect-requests). A legitimate
// peer sends one REQ a connection. The table holds madSources sources;
// a new source takes the entry least recently refilled. The engine
// goroutine owns it.
const (
	madSources = 64
	madBurst   = 4096
	madRate    = 100_000
	madCost    = int64(time.Second / madRate) // refill time of one MAD, ns
	reqRate    = 10_000
	reqCost    = int64(time.Second / reqRate)
)

type madSource struct {
	src    netip.Addr
	credit int64 // ns of refill time: a MAD costs madCost
	last   int64 // clock at the last refill
}

type madRateTable struct {
	epoch   time.Time
	entries [madSources]madSource
	n       int
}

// allow reports whether a MAD from src that costs cost (madCost or
// reqCost) may be queued, and charges it.
func (t *madRateTable) allow(src netip.Addr, cost int64) bool {
	if t.epoch.IsZero() {
		t.epoch = time.Now()
	}
	now := int64(time.Since(t.epoch))
	var s *madSource
	for i := range t.entries[:t.n] {
		if t.entries[i].src == src {
			s = &t.entries[i]
			break
		}
	}
	if s == nil {
		if t.n < len(t.entries) {
			t.n++
			s = &t.entries[t.n-1]
		} else {
			s = &t.entries[0]
			for i := range t.entries {
				if t.entries[i].last < s.last {
					s = &t.entries[i]
				}
			}
		}
		*s = madSource{src: src, credit: madBurst * madCost, last: now}
	}
	s.credit = min(s.credit+now-s.last, madBurst*madCost)
	s.last = now
	if s.credit < cost {
		return false
	}
	s.credit -= cost
	return true
}
