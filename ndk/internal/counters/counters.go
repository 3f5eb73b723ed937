package counters

// Engine is one engine's counters since it started: what rc.Engine.Stats
// and ndk.Adapter.Stats return, one per queue. Every field is a uint64
// count with the tags counter (its name), unit and help.
//
// The engine increments a live Engine with atomic adds on its goroutine
// and takes snapshots with Snapshot; the rest of the program reads
// copies. The daemon sends its engines' counts to its clients as JSON
// keyed by the field names (of ndk.EngineStats, generated from Engine),
// so a field's name is part of that protocol.
type Engine struct {
	// Frames the engine received from and handed to its AF_XDP socket.
	FramesIn  uint64 `counter:"frames_in" unit:"frames" help:"Frames the engine received from its AF_XDP socket."`
	FramesOut uint64 `counter:"frames_out" unit:"frames" help:"Frames the engine handed to its AF_XDP socket."`

	// Frames dropped on receive, by reason.
	Malformed    uint64 `counter:"malformed" unit:"frames" help:"Frames dropped on receive: not a RoCEv2 frame the wire format allows (other than the ICRC)."`
	BadICRC      uint64 `counter:"bad_icrc" unit:"frames" help:"Frames dropped on receive: the invariant CRC did not match."`
	NotRC        uint64 `counter:"not_rc" unit:"frames" help:"Frames dropped on receive: CNPs, UC frames for an RC QP and RC frames for a UC QP, and QP1 datagrams no engine of the adapter takes (UD to other QPs is counted as for RC: unknown_qp, not_connected)."`
	UnknownQP    uint64 `counter:"unknown_qp" unit:"frames" help:"Frames dropped on receive: for a QP number the adapter does not have."`
	NotConnected uint64 `counter:"not_connected" unit:"frames" help:"Frames dropped on receive: for a QP not connected or in error."`
	WrongSource  uint64 `counter:"wrong_source" unit:"frames" help:"Frames dropped on receive: from an address that is not the QP's peer."`
	BadPKey      uint64 `counter:"bad_pkey" unit:"frames" help:"Frames dropped on receive: RC frames whose P_Key is not the default partition's."`
	Stale        uint64 `counter:"stale" unit:"frames" help:"Frames dropped on receive: ACKs and responses outside the window, duplicate responses."`

	// Responder.
	Duplicates       uint64 `counter:"duplicates" unit:"requests" help:"Duplicate requests the responder answered again (rxe duplicate_request)."`
	OutOfSeq         uint64 `counter:"out_of_seq" unit:"requests" help:"Requests ahead of the expected PSN (rxe out_of_seq_request)."`
	NAKsSent         uint64 `counter:"naks_sent" unit:"NAKs" help:"NAKs sent: PSN sequence, invalid request, access and operational."`
	RNRSent          uint64 `counter:"rnr_sent" unit:"NAKs" help:"RNR NAKs sent: a SEND found no receive posted (rxe send_rnr_err)."`
	AccessViolations uint64 `counter:"access_violations" unit:"requests" help:"Requests NAKed for a memory token they may not use (a wrong R_Key, bounds or rights, or a SEND invalidating a token it may not)."`
	AccessLimited    uint64 `counter:"access_limited" unit:"requests" help:"Requests carrying a token dropped unexamined because their source made more access violations than its limit (16 at once, 4 a second)."`
	Atomics          uint64 `counter:"atomics" unit:"requests" help:"Atomic requests executed."`
	AtomicReplays    uint64 `counter:"atomic_replays" unit:"requests" help:"Duplicate atomic requests answered from a saved result instead of executing again."`

	// Requester.
	Retransmits  uint64 `counter:"retransmits" unit:"rounds" help:"Go-back-N retransmission rounds (rxe completer_retry_err)."`
	Timeouts     uint64 `counter:"timeouts" unit:"expiries" help:"ACK timer expiries."`
	NAKsReceived uint64 `counter:"naks_received" unit:"NAKs" help:"NAKs received."`
	RNRReceived  uint64 `counter:"rnr_received" unit:"NAKs" help:"RNR NAKs received (rxe rcvd_rnr_err)."`
	Completions  uint64 `counter:"completions" unit:"completions" help:"Completions the engine pushed to CQs (sends and receives)."`

	// Port.
	TxFull       uint64 `counter:"tx_full" unit:"frames" help:"Transmissions refused by a full TX ring."`
	TxErrors     uint64 `counter:"tx_errors" unit:"errors" help:"Transmit errors."`
	RxErrors     uint64 `counter:"rx_errors" unit:"errors" help:"Receive errors."`
	EncodeErrors uint64 `counter:"encode_errors" unit:"frames" help:"Frames that could not be encoded."`
	Sleeps       uint64 `counter:"sleeps" unit:"sleeps" help:"Adaptive-mode waits: the engine slept in poll(2)."`
	SlowYields   uint64 `counter:"slow_yields" unit:"yields" help:"Idle yields another thread answered with a whole time slice: a core shared with a thread that does not yield (internal/spin)."`
	// Consumer-driven progress (rc/progress.go).
	ConsumerTurns uint64 `counter:"consumer_turns" unit:"turns" help:"Engine turns a consumer ran on its own thread: a CQ poll that found nothing, or a post (polling mode progress)."`

	// Forwarding between the engines of an adapter (rc/forward.go).
	ForwardedOut uint64 `counter:"forwarded_out" unit:"frames" help:"Frames that arrived on this engine's queue for a QP of another engine of the adapter (RSS chose the queue) and were handed to it."`
	ForwardedIn  uint64 `counter:"forwarded_in" unit:"frames" help:"Frames other engines of the adapter handed to this one."`
	ForwardDrops uint64 `counter:"forward_drops" unit:"frames" help:"Frames dropped because no forwarding buffer or inbox slot was free."`

	// Errors by kind, as rxe counts them.
	CNPs               uint64 `counter:"cnps" unit:"frames" help:"CNPs received (congestion notifications, which DCQCN acts on where congestion control is on); also counted in not_rc."`
	RetryExceeded      uint64 `counter:"retry_exceeded" unit:"requests" help:"Requests that failed after their retries: the QP went to error (rxe retry_exceeded_err)."`
	RNRRetryExceeded   uint64 `counter:"rnr_retry_exceeded" unit:"requests" help:"Requests that failed after their RNR retries: the QP went to error (rxe retry_rnr_exceeded_err)."`
	LocalAccessErrors  uint64 `counter:"local_access_errors" unit:"requests" help:"Peers' requests this responder refused with a remote access NAK (a bad R_Key, range or permission)."`
	RemoteAccessErrors uint64 `counter:"remote_access_errors" unit:"requests" help:"This requester's requests a peer refused with a remote access NAK."`
	SequenceErrors     uint64 `counter:"sequence_errors" unit:"NAKs" help:"PSN sequence error NAKs received, among naks_received: the peer saw a gap (rxe rcvd_seq_err)."`
	BadSyndromes       uint64 `counter:"bad_syndromes" unit:"frames" help:"ACKs, READ responses and atomic acknowledgements whose AETH syndrome IBTA reserves for that opcode; each failed the request it answered (IB_WC_BAD_RESP_ERR)."`
	WrongDestination   uint64 `counter:"wrong_destination" unit:"frames" help:"Frames addressed to another MAC or IP address than their QP's (or, for QP1, the adapter's), dropped unexamined."`
	ReplaysDeferred    uint64 `counter:"replays_deferred" unit:"turns" help:"Times a QP's answers to duplicate requests waited for the engine's next turn, their budget spent, so that the other QPs went first."`
	CNPsSent           uint64 `counter:"cnps_sent" unit:"frames" help:"CNPs the notification point sent for ECN-marked (CE) frames received, at most one per QP per interval."`
	RateCuts           uint64 `counter:"rate_cuts" unit:"cuts" help:"DCQCN rate cuts the reaction point made for CNPs received (at most one per QP per rate reduce monitor period)."`
	LossCuts           uint64 `counter:"loss_cuts" unit:"cuts" help:"Rate cuts for losses the peer reported (a duplicate READ, a sequence NAK, an ACK timeout): loss-driven pacing."`
	BadQKey            uint64 `counter:"bad_qkey" unit:"frames" help:"UD datagrams dropped on receive: their DETH Q_Key is not the QP's (rxe check_keys)."`
	UCDropped          uint64 `counter:"uc_dropped" unit:"frames" help:"UC request packets dropped on receive, with the rest of their message: a PSN gap or a packet out of its message's order, no receive posted, a bad R_Key or a length the message may not have (rxe drop_msg)."`
	UDDropped          uint64 `counter:"ud_dropped" unit:"frames" help:"UD datagrams dropped on receive: no receive posted, or one too small for the GRH and the payload (rxe drop_msg)."`
}

// QP is one QP's counters since it was created, with the same tags as
// Engine's plus json (the name again), for the daemon's QP rows that
// embed it. The engine keeps them in plain fields, written and read only
// on the QP's engine goroutine.
type QP struct {
	FramesIn     uint64 `json:"frames_in" counter:"frames_in" unit:"frames" help:"Frames the QP received."`
	FramesOut    uint64 `json:"frames_out" counter:"frames_out" unit:"frames" help:"Frames the QP sent."`
	Retransmits  uint64 `json:"retransmits" counter:"retransmits" unit:"rounds" help:"The QP's go-back-N retransmission rounds."`
	Timeouts     uint64 `json:"ack_timeouts" counter:"ack_timeouts" unit:"expiries" help:"The QP's ACK timer expiries."`
	NAKsSent     uint64 `json:"naks_sent" counter:"naks_sent" unit:"NAKs" help:"NAKs the QP sent."`
	NAKsReceived uint64 `json:"naks_received" counter:"naks_received" unit:"NAKs" help:"NAKs the QP received."`
	RNRSent      uint64 `json:"rnr_naks_sent" counter:"rnr_naks_sent" unit:"NAKs" help:"RNR NAKs the QP sent."`
	RNRReceived  uint64 `json:"rnr_naks_received" counter:"rnr_naks_received" unit:"NAKs" help:"RNR NAKs the QP received."`
	Duplicates   uint64 `json:"duplicate_requests" counter:"duplicate_requests" unit:"requests" help:"Duplicate requests the QP answered again."`
	OutOfSeq     uint64 `json:"out_of_sequence" counter:"out_of_sequence" unit:"requests" help:"Requests ahead of the QP's expected PSN."`
}
