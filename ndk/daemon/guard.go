package daemon

import (
	"fmt"
	"runtime/debug"
	"sync/atomic"
)

// Why the daemon ended a session that the client did not close: every
// one is the client's doing, costs that session alone, is logged with
// its detail and counted (Status.Ended, ndkxdp_sessions_ended_total).
const (
	reasonProtocol      = "protocol"      // a control message no correct client sends
	reasonRing          = "ring"          // a bitmap or shared word no correct client writes
	reasonPanic         = "panic"         // a panic while serving the session, contained
	reasonNotifications = "notifications" // its notifications piled up unread
	nReasons            = 4
)

var reasons = [nReasons]string{reasonProtocol, reasonRing, reasonPanic, reasonNotifications}

// endCounts counts the sessions ended for each reason.
type endCounts [nReasons]atomic.Uint64

func (c *endCounts) add(reason string) {
	for i, r := range reasons {
		if r == reason {
			c[i].Add(1)
			return
		}
	}
}

// snapshot returns the counts by reason, every reason present.
func (c *endCounts) snapshot() map[string]uint64 {
	m := make(map[string]uint64, nReasons)
	for i, r := range reasons {
		m[r] = c[i].Load()
	}
	return m
}

// end closes the session for what its client did: logged once with the
// reason, counted, and torn down as if the client had died. It never
// blocks, so the engine's loop may call it.
func (ss *session) end(reason string, err error) {
	if !ss.ended.CompareAndSwap(false, true) {
		return
	}
	ss.srv.ended.add(reason)
	ss.log.Warn("client's session ended by the daemon", "reason", reason, "err", err)
	go ss.kill()
}

// recovered turns a panic in the session's handling into the end of that
// session; called deferred on every goroutine that serves a session.
func (ss *session) recovered(where string) {
	if p := recover(); p != nil {
		ss.end(reasonPanic, fmt.Errorf("%s: %v\n%s", where, p, stack()))
	}
}

// stack is the panicking goroutine's stack, for the log.
func stack() []byte { return debug.Stack() }
