package ndk

import "github.com/ndkxdp/ndkxdp/ndk/internal/rc"

// EngineStats are one engine's counters since the adapter opened: what
// Adapter.Stats returns, one per queue. Every field is a count.
//
// The fields that explain a latency tail are the requester's
// Retransmits, Timeouts and RNRReceived, and the responder's RNRSent.
type EngineStats struct {
	// Frames the engine received from and handed to its AF_XDP socket.
	FramesIn, FramesOut uint64

	// Frames dropped on receive, by reason.
	Malformed    uint64 // not a RoCEv2 frame the wire format allows (other than the ICRC)
	BadICRC      uint64 // the invariant CRC did not match
	NotRC        uint64 // CNP, UC, UD: not handled by the RC engine
	UnknownQP    uint64 // for a QP number the adapter does not have
	NotConnected uint64 // for a QP not connected or in error
	WrongSource  uint64 // from an address that is not the QP's peer
	BadPKey      uint64 // RC frames whose P_Key is not the default partition's
	Stale        uint64 // ACKs and responses outside the window, duplicate responses

	// Responder: duplicate requests answered again, requests ahead of the
	// expected PSN, NAKs sent (PSN sequence, invalid request, access,
	// operational), RNR NAKs sent (a SEND found no receive posted).
	Duplicates uint64
	OutOfSeq   uint64
	NAKsSent   uint64
	RNRSent    uint64
	// Requests NAKed for a memory token they may not use (a wrong R_Key,
	// bounds or rights, or a SEND invalidating a token it may not), and
	// requests carrying a token dropped unexamined because their source
	// made more such violations than its limit (16 at once, 4 a second).
	AccessViolations, AccessLimited uint64
	// Atomics executed, and duplicates answered from a saved result
	// instead of executing again.
	Atomics, AtomicReplays uint64

	// Requester: go-back-N retransmission rounds, ACK timer expiries,
	// NAKs and RNR NAKs received, completions pushed (sends and receives).
	Retransmits  uint64
	Timeouts     uint64
	NAKsReceived uint64
	RNRReceived  uint64
	Completions  uint64

	// Port: transmissions refused by a full TX ring, transmit, receive
	// and frame-encoding errors, and the adaptive-mode sleeps.
	TxFull, TxErrors, RxErrors, EncodeErrors uint64
	Sleeps                                   uint64
	// SlowYields counts idle yields another thread answered with a whole
	// time slice: a core shared with a thread that does not yield.
	SlowYields uint64

	// Frames that arrived on this engine's queue for a QP of another
	// engine of the adapter and were handed to it; frames other engines
	// handed to this one; frames dropped because no forwarding buffer or
	// inbox slot was free.
	ForwardedOut, ForwardedIn, ForwardDrops uint64

	// CNPs received (congestion notifications; the reaction point acts
	// on them with CongestionOn); they are also in NotRC. CNPsSent are
	// the notification point's, for CE-marked frames.
	CNPs, CNPsSent uint64
	// Requests that failed after their retries, or their RNR retries: the
	// QP went to error (rxe retry_exceeded_err, retry_rnr_exceeded_err).
	RetryExceeded, RNRRetryExceeded uint64
	// Peers' requests this responder refused with a remote access NAK (a
	// bad R_Key, range or permission), and this requester's requests a
	// peer refused so.
	LocalAccessErrors, RemoteAccessErrors uint64
	// SequenceErrors counts the PSN sequence error NAKs among
	// NAKsReceived: the peer saw a gap (rxe rcvd_seq_err).
	SequenceErrors uint64
	// BadSyndromes counts answers whose AETH syndrome IBTA reserves: each
	// failed the request it answered (ProviderErrorCode 7,
	// IB_WC_BAD_RESP_ERR).
	BadSyndromes uint64
	// WrongDestination counts frames addressed to another MAC or IP
	// address than the adapter's (the QP's), dropped unexamined.
	WrongDestination uint64
	// ReplaysDeferred counts the times a QP's answers to duplicate
	// requests waited for the engine's next turn, their budget spent, so
	// that the other QPs went first.
	ReplaysDeferred uint64
}

// Add adds o's counters to s, to total an adapter's engines.
func (s *EngineStats) Add(o EngineStats) {
	r := rc.Stats(*s)
	r.Add(rc.Stats(o))
	*s = EngineStats(r)
}

// engineStats converts the engines' counters. The conversion compiles
// only while EngineStats and rc.Stats have the same fields in the same
// order, so a counter added to the engine must be added here.
func engineStats(in []rc.Stats) []EngineStats {
	out := make([]EngineStats, len(in))
	for i, s := range in {
		out[i] = EngineStats(s)
	}
	return out
}
