package rc

import (
	"reflect"
	"sync/atomic"
)

// counters are written by the engine goroutine and read by Stats from
// anywhere.
type counters struct {
	framesIn, framesOut     atomic.Uint64
	malformed, badICRC      atomic.Uint64
	notRC, unknownQP        atomic.Uint64
	notConnected, stale     atomic.Uint64
	wrongSource, badPKey    atomic.Uint64
	duplicates, outOfSeq    atomic.Uint64
	retransmits, timeouts   atomic.Uint64
	naksSent, naksReceived  atomic.Uint64
	rnrSent, rnrReceived    atomic.Uint64
	txFull, txErrors        atomic.Uint64
	rxErrors, encodeErrors  atomic.Uint64
	sleeps, slowYields      atomic.Uint64
	completions, recvPlaced atomic.Uint64
	atomics, atomicReplays  atomic.Uint64
	accessViolations        atomic.Uint64
	accessLimited           atomic.Uint64
	// writesPlaced is incremented after each WRITE packet's bytes are
	// placed: a release that PlacedWrites' load pairs with.
	writesPlaced atomic.Uint64
	// Forwarding between the engines of an adapter (forward.go).
	forwardedOut, forwardedIn, forwardDrops atomic.Uint64
	// Errors by kind, as rxe counts them (inspect.go).
	cnps, retryExceeded, rnrRetryExceeded atomic.Uint64
	localAccessErrors, remoteAccessErrors atomic.Uint64
	seqNAKsReceived                       atomic.Uint64
	badSyndromes, wrongDestination        atomic.Uint64
	replaysDeferred                       atomic.Uint64
	cnpsSent                              atomic.Uint64
}

// PlacedWrites returns how many RDMA WRITE packets the QP's engine has
// placed into memory (for every QP of the engine). The load is an
// acquire: bytes those packets placed are visible to the caller afterwards,
// so a consumer may poll memory a peer writes without a data race.
func (q *QP) PlacedWrites() uint64 { return q.eng.c.writesPlaced.Load() }

// ArmPlacedWrites asks for one token on ch (a send that never blocks: a
// full ch already holds one) when the engine next places a WRITE packet
// for q; a later arm replaces an earlier one. A consumer that polls
// memory a peer writes arms, checks the memory once more, and then blocks
// on ch: the engine increments PlacedWrites before it looks at the arm,
// and both are sequentially consistent atomics, so either the check sees
// the bytes or the engine sees the arm.
func (q *QP) ArmPlacedWrites(ch *chan struct{}) { q.writeArm.Store(ch) }

// wakeArmed fires and clears a one-shot arm.
func wakeArmed(arm *atomic.Pointer[chan struct{}]) {
	if ch := arm.Swap(nil); ch != nil {
		select {
		case *ch <- struct{}{}:
		default:
		}
	}
}

// Stats are an engine's counters since it started.
type Stats struct {
	FramesIn, FramesOut uint64
	// Frames dropped on receive, by reason.
	Malformed    uint64 // rejected by rocev2.Parse for a reason other than the ICRC
	BadICRC      uint64
	NotRC        uint64 // CNP, UC, UD: not handled by the RC engine
	UnknownQP    uint64
	NotConnected uint64 // for a QP not connected or in error
	WrongSource  uint64 // from an address that is not the QP's peer (Config.AnySource)
	BadPKey      uint64 // RC frames whose P_Key is not the default partition's
	Stale        uint64 // ACKs and responses outside the window, duplicate responses
	// Responder.
	Duplicates uint64 // duplicate requests re-acknowledged or re-read
	OutOfSeq   uint64 // requests ahead of the expected PSN
	NAKsSent   uint64 // PSN sequence, invalid request, access and operational NAKs
	RNRSent    uint64
	// AccessViolations are the requests NAKed for a memory token they may
	// not use (remote access errors: a wrong R_Key, bounds or rights; and
	// SENDs invalidating a token they may not); AccessLimited the requests
	// carrying a token dropped because their source made too many
	// (violations.go, Engine.ViolationSources).
	AccessViolations, AccessLimited uint64
	// Atomics executed, and duplicates answered from a saved result
	// instead of executing again.
	Atomics, AtomicReplays uint64
	// Requester.
	Retransmits  uint64 // go-back-N rounds
	Timeouts     uint64 // ACK timer expiries
	NAKsReceived uint64
	RNRReceived  uint64
	Completions  uint64 // CQEs pushed by this engine (sends and receives)
	// Port.
	TxFull, TxErrors, RxErrors, EncodeErrors uint64
	Sleeps                                   uint64 // adaptive-mode waits
	// SlowYields counts idle yields another thread answered with a whole
	// time slice (internal/spin): a core shared with a thread that does
	// not yield, after which the engine only yields its P for a while.
	SlowYields uint64
	// Frames that arrived on this engine's queue for a QP of another
	// engine of the adapter (the NIC's RSS chose the queue) and were
	// handed to it; frames other engines handed to this one; frames
	// dropped because no forwarding buffer or inbox slot was free.
	ForwardedOut, ForwardedIn, ForwardDrops uint64
	// CNPs received (congestion notifications; acted on with CCOn); they
	// are also in NotRC. CNPsSent are those the notification point sent
	// for CE-marked frames.
	CNPs, CNPsSent uint64
	// Requests that failed after their retries (rxe retry_exceeded_err,
	// retry_rnr_exceeded_err): the QP went to error.
	RetryExceeded, RNRRetryExceeded uint64
	// LocalAccessErrors counts peers' requests this responder refused
	// with a remote access NAK (a bad R_Key, range or permission);
	// RemoteAccessErrors counts this requester's requests a peer refused
	// so.
	LocalAccessErrors, RemoteAccessErrors uint64
	// SequenceErrors counts the PSN sequence error NAKs among
	// NAKsReceived: a peer saw a gap (rxe rcvd_seq_err).
	SequenceErrors uint64
	// BadSyndromes counts ACKs, READ responses and ATOMIC_ACKNOWLEDGEs
	// whose AETH syndrome IBTA reserves for that opcode; each failed the
	// request it answered (IB_WC_BAD_RESP_ERR).
	BadSyndromes uint64
	// WrongDestination counts frames addressed to a MAC or IP address
	// that is not the one their QP (or, for QP1, the adapter) was set up
	// with, dropped before anything in them ran.
	WrongDestination uint64
	// ReplaysDeferred counts the times a QP's answers to duplicate
	// requests waited for the next loop because it had spent its replay
	// budget (engine.go, replayBudget).
	ReplaysDeferred uint64
}

// Add adds o's counters to s, to total the engines of an adapter. Every
// field of Stats is a uint64 count (TestStatsAddCoversEveryField).
func (s *Stats) Add(o Stats) {
	dst, src := reflect.ValueOf(s).Elem(), reflect.ValueOf(o)
	for i := range dst.NumField() {
		dst.Field(i).SetUint(dst.Field(i).Uint() + src.Field(i).Uint())
	}
}

// Stats returns the engine's counters. While the engine runs, the
// snapshot is taken on the engine goroutine, so it is consistent and
// orders the caller with the engine: what the engine did before (placing a
// WRITE's bytes, say) happens before Stats returns, and what the caller
// did before calling (filling memory a peer will READ) happens before the
// engine's next step. A peer's completion tells the consumer that the
// engine placed bytes, but that causality crosses the kernel, where the
// race detector cannot follow it; Stats makes it visible.
func (e *Engine) Stats() Stats {
	var s Stats
	if e.do(func() { s = e.snapshot() }) != nil {
		s = e.snapshot()
	}
	return s
}

func (e *Engine) snapshot() Stats {
	c := &e.c
	return Stats{
		FramesIn: c.framesIn.Load(), FramesOut: c.framesOut.Load(),
		Malformed: c.malformed.Load(), BadICRC: c.badICRC.Load(),
		NotRC: c.notRC.Load(), UnknownQP: c.unknownQP.Load(),
		NotConnected: c.notConnected.Load(), Stale: c.stale.Load(),
		WrongSource: c.wrongSource.Load(), BadPKey: c.badPKey.Load(),
		Duplicates: c.duplicates.Load(), OutOfSeq: c.outOfSeq.Load(),
		NAKsSent: c.naksSent.Load(), RNRSent: c.rnrSent.Load(),
		Atomics: c.atomics.Load(), AtomicReplays: c.atomicReplays.Load(),
		AccessViolations: c.accessViolations.Load(), AccessLimited: c.accessLimited.Load(),
		Retransmits: c.retransmits.Load(), Timeouts: c.timeouts.Load(),
		NAKsReceived: c.naksReceived.Load(), RNRReceived: c.rnrReceived.Load(),
		Completions: c.completions.Load(),
		TxFull:      c.txFull.Load(), TxErrors: c.txErrors.Load(),
		RxErrors: c.rxErrors.Load(), EncodeErrors: c.encodeErrors.Load(),
		Sleeps: c.sleeps.Load(), SlowYields: c.slowYields.Load(),
		ForwardedOut: c.forwardedOut.Load(), ForwardedIn: c.forwardedIn.Load(), ForwardDrops: c.forwardDrops.Load(),
		CNPs: c.cnps.Load(), CNPsSent: c.cnpsSent.Load(), RetryExceeded: c.retryExceeded.Load(), RNRRetryExceeded: c.rnrRetryExceeded.Load(),
		LocalAccessErrors: c.localAccessErrors.Load(), RemoteAccessErrors: c.remoteAccessErrors.Load(),
		SequenceErrors: c.seqNAKsReceived.Load(), BadSyndromes: c.badSyndromes.Load(),
		WrongDestination: c.wrongDestination.Load(), ReplaysDeferred: c.replaysDeferred.Load(),
	}
}

// PlacedWrites is QP.PlacedWrites for the engine as a whole.
func (e *Engine) PlacedWrites() uint64 { return e.c.writesPlaced.Load() }
