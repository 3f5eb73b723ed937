package cmtest

import (
	"fmt"
	"sync"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// QP is a fake cm.QP that records what the CM asks of it.
type QP struct {
	N   uint32
	PSN rocev2.PSN

	mu sync.Mutex
	// FailRTR and FailRTS, when set, are returned by the transitions.
	FailRTR, FailRTS error
	// HoldDrain keeps Drained callbacks until Drain is called, as a QP
	// with DMA still in flight would.
	HoldDrain bool

	state    string
	remote   cm.RemoteInfo
	history  []string
	errors   int
	errored  bool
	drainFns []func()
}

// NewQP returns a fake QP in INIT.
func NewQP(qpn uint32, psn rocev2.PSN) *QP {
	return &QP{N: qpn, PSN: psn, state: "init"}
}

// QPN implements cm.QP.
func (q *QP) QPN() uint32 { return q.N }

// StartingPSN implements cm.QP.
func (q *QP) StartingPSN() rocev2.PSN { return q.PSN }

// ToRTR implements cm.QP.
func (q *QP) ToRTR(r cm.RemoteInfo) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.history = append(q.history, "rtr")
	if q.FailRTR != nil {
		return q.FailRTR
	}
	if q.state != "init" {
		return fmt.Errorf("fake QP %d: RTR from %s", q.N, q.state)
	}
	q.state, q.remote = "rtr", r
	return nil
}

// ToRTS implements cm.QP.
func (q *QP) ToRTS() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.history = append(q.history, "rts")
	if q.FailRTS != nil {
		return q.FailRTS
	}
	if q.state != "rtr" {
		return fmt.Errorf("fake QP %d: RTS from %s", q.N, q.state)
	}
	q.state = "rts"
	return nil
}

// ToError implements cm.QP.
func (q *QP) ToError() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.history = append(q.history, "error")
	q.state = "error"
	q.errors++
	q.errored = true
}

// Drained implements cm.QP.
func (q *QP) Drained(f func()) {
	q.mu.Lock()
	if q.HoldDrain || !q.errored {
		q.drainFns = append(q.drainFns, f)
		q.mu.Unlock()
		return
	}
	q.mu.Unlock()
	f()
}

// Drain releases held Drained callbacks.
func (q *QP) Drain() {
	q.mu.Lock()
	fns := q.drainFns
	q.drainFns, q.HoldDrain = nil, false
	q.mu.Unlock()
	for _, f := range fns {
		f()
	}
}

// State returns "init", "rtr", "rts" or "error".
func (q *QP) State() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state
}

// Remote returns what ToRTR was given.
func (q *QP) Remote() cm.RemoteInfo {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.remote
}

// History returns the transitions asked for, in order.
func (q *QP) History() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]string(nil), q.history...)
}

// ErrorCount returns how often ToError was called.
func (q *QP) ErrorCount() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.errors
}
