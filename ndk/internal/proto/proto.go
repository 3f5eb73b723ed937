package proto

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
)

// Version is the protocol version a client and the daemon must share; a
// hello with another is refused.
const Version = 3

// VersionMismatch is what a client and a daemon of different protocol
// versions say, whichever side finds out: the daemon refusing the hello,
// or the client reading the version of the daemon's answer.
func VersionMismatch(client, daemon int) string {
	return fmt.Sprintf("client speaks protocol version %d, daemon %d: use a client and a daemon of one ndkxdp release", client, daemon)
}

// MaxMessage bounds one control message (a SOCK_SEQPACKET datagram).
const MaxMessage = 64 << 10

// Operations a client asks of the daemon. Each names the NDK call it
// carries out on the daemon's adapter; ops.go has its request and reply
// types.
const (
	OpHello           = "hello"            // first message: version, AdapterInfo, wire; reply FDs: the relay's eventfd, the session segment (Seg.Size)
	OpArena           = "arena"            // a memfd of client memory (FDs: the memfd)
	OpCreateCQ        = "create_cq"        // Depth; reply: H, segment (FDs)
	OpCloseCQ         = "close_cq"         // H
	OpResizeCQ        = "resize_cq"        // H, Depth; reply: segment (FDs) of the new ring
	OpModerateCQ      = "moderate_cq"      // H, Timeout (interval, ns; 0: none), Depth (count; 0: none): the effective bounds
	OpCreatePD        = "create_pd"        // reply: H
	OpClosePD         = "close_pd"         // H; event pd_closed follows
	OpRegister        = "register"         // PD, Arena, Off, Len, Flags, Invalidatable; reply: H, tokens
	OpDeregister      = "deregister"       // H
	OpCreateQP        = "create_qp"        // PD, RecvCQ, SendCQ, depths, SGEs, inline; reply: H, QPN, PSN, Queue, segment
	OpCloseQP         = "close_qp"         // H
	OpFlushQP         = "flush_qp"         // H
	OpConnectOOB      = "connect_oob"      // H, Endpoint, ConnOpts
	OpCreateConnector = "create_connector" // reply: H
	OpConnect         = "connect"          // H (connector), QP, Addr (src, may be empty) or SE, Addr2 (dst), IRD, ORD, Data, Timeout
	OpCompleteConnect = "complete_connect" // H
	OpAccept          = "accept"           // H, QP, IRD, ORD, Data, Timeout
	OpReject          = "reject"           // H, Data
	OpDisconnect      = "disconnect"       // H, Timeout, Abortive
	OpConnData        = "conn_data"        // H; reply: IRD, ORD, Data
	OpCloseConnector  = "close_connector"  // H; event connector_closed follows
	OpCreateListener  = "create_listener"  // reply: H
	OpListen          = "listen"           // H, Addr
	OpPauseListener   = "pause_listener"   // H, Pause
	OpCloseListener   = "close_listener"   // H; event listener_closed follows
	OpCreateEndpoint  = "create_endpoint"  // Addr; reply: H, Addr (a shared endpoint)
	OpCloseEndpoint   = "close_endpoint"   // H
	OpStats           = "stats"            // reply: Raw (engine stats), Raw2 (CM stats)
	OpCancel          = "cancel"           // Target: a blocking request to give up
	OpCreateSRQ       = "create_srq"       // PD, Depth, RecvSGE, Threshold; reply: H, segment (FDs)
	OpModifySRQ       = "modify_srq"       // H, Depth, Threshold
	OpSRQLen          = "srq_len"          // H; reply: Depth (receives queued in the daemon's SRQ)
	OpCloseSRQ        = "close_srq"        // H; event srq_closed follows
	OpCreateMW        = "create_mw"        // PD; reply: H, Remote (its token), KeyBits
	OpCloseMW         = "close_mw"         // H
	OpInitFastMR      = "init_fast_mr"     // PD, H (0: a new fast MR), Depth (pages), Flags (1: remote access); reply: H, tokens, KeyBits
)

// Events the daemon sends on its own.
const (
	EvCQ              = "cq"               // H: CQ notification, Status: the CQ's status
	EvIncoming        = "incoming"         // H: listener, H2: the new connector, Addr/Addr2: local/peer
	EvDisconnect      = "disconnect"       // H: connector whose peer disconnected
	EvConnectorClosed = "connector_closed" // H
	EvListenerClosed  = "listener_closed"  // H
	EvPDClosed        = "pd_closed"        // H
	EvPeerWrite       = "peer_write"       // H: QP whose armed peer-write count moved (ArmPeerWrites)
	EvSRQ             = "srq"              // H: SRQ notification, Status: SUCCESS (threshold crossed) or INTERNAL_ERROR (its ring broken)
	EvSRQClosed       = "srq_closed"       // H
)

// Endpoint is ndk.Endpoint on the wire.
type Endpoint struct {
	IP  string `json:"ip"`
	MAC string `json:"mac,omitempty"`
	QPN uint32 `json:"qpn"`
	PSN uint32 `json:"psn"`
}

// ConnOpts is ndk.ConnectOptions on the wire.
type ConnOpts struct {
	PathMTU           int           `json:"pmtu,omitempty"`
	InboundReadLimit  int           `json:"ird,omitempty"`
	OutboundReadLimit int           `json:"ord,omitempty"`
	AckTimeoutNs      int64         `json:"ack_timeout,omitempty"`
	RetryCount        *int          `json:"retry,omitempty"`
	RNRRetry          *int          `json:"rnr_retry,omitempty"`
	MinRNRTimerNs     int64         `json:"min_rnr,omitempty"`
	Traffic           *TrafficClass `json:"traffic,omitempty"`
	_                 [0]int        // keep positional literals out
}

// TrafficClass is ndk.TrafficClass on the wire.
type TrafficClass struct {
	DSCP   uint8  `json:"dscp,omitempty"`
	ECN    uint8  `json:"ecn,omitempty"`
	VLAN   bool   `json:"vlan,omitempty"`
	VLANID uint16 `json:"vlan_id,omitempty"`
	PCP    uint8  `json:"pcp,omitempty"`
}

// Request is any client message: the fields of every operation's request
// (ops.go) under their wire names, for messages built by hand. Fields not
// named by the operation are ignored; the daemon checks every one it
// uses.
type Request struct {
	ID uint64 `json:"id"`
	Op string `json:"op"`
	H  uint32 `json:"h,omitempty"`

	Version int `json:"version,omitempty"`

	PD     uint32 `json:"pd,omitempty"`
	RecvCQ uint32 `json:"rcq,omitempty"`
	SendCQ uint32 `json:"scq,omitempty"`
	QP     uint32 `json:"qp,omitempty"`
	SRQ    uint32 `json:"srq,omitempty"` // create_qp: NdkCreateQpWithSrq
	SE     uint32 `json:"se,omitempty"`  // a shared endpoint to connect from

	Depth, SendDepth   int `json:",omitempty"`
	RecvSGE, SendSGE   int `json:",omitempty"`
	Inline             int `json:",omitempty"`
	Threshold          int `json:",omitempty"`
	Flags              uint32
	Invalidatable      bool   `json:",omitempty"`
	Arena              uint32 `json:",omitempty"`
	Off, Len, Size, VA uint64 `json:",omitempty"`
	Addr, Addr2        string `json:",omitempty"`
	IRD, ORD           int    `json:",omitempty"`
	Data               []byte `json:",omitempty"`
	Timeout            int64  `json:",omitempty"` // ns; 0: none
	Pause              bool   `json:",omitempty"`
	Target             uint64 `json:",omitempty"`
	Remote             *Endpoint
	Opts               *ConnOpts // connect_oob; connect and accept: the retry counts only
	Abortive           bool      `json:",omitempty"` // disconnect: NDK_FN_DISCONNECT_EX's Abortive

	UD   bool   `json:"ud,omitempty"`   // create_qp: a UD QP
	QKey uint32 `json:"qkey,omitempty"` // create_qp: the UD QP's Q_Key
}

// Message is what the daemon sends: a reply (ID set) or an event (Ev set).
type Message struct {
	ID     uint64 `json:"id,omitempty"`
	Ev     string `json:"ev,omitempty"`
	Status uint32 `json:"status,omitempty"` // NTSTATUS; 0 is success
	Msg    string `json:"msg,omitempty"`
	// Detail is an ndk error's detail, apart from Msg (its cause), so
	// that the client's error reads as the in-process one.
	Detail string `json:"detail,omitempty"`

	H, H2 uint32 `json:",omitempty"`

	// Segment describes the shared memory sent with the message.
	Seg *Segment `json:",omitempty"`

	Local, Remote uint32          `json:",omitempty"` // MR tokens
	QPN, PSN      uint32          `json:",omitempty"`
	Slot          int             `json:",omitempty"` // a QP's slot in the session's bitmaps
	Queue         int             `json:",omitempty"`
	IRD, ORD      int             `json:",omitempty"`
	Data          []byte          `json:",omitempty"`
	Addr, Addr2   string          `json:",omitempty"`
	MAC           string          `json:",omitempty"`
	PathMTU       int             `json:",omitempty"`
	Version       int             `json:",omitempty"`
	Raw, Raw2     json.RawMessage `json:",omitempty"`
	// Reason is an EvDisconnect's ndk.DisconnectReason (NDKPI 2.1's
	// ProviderDisconnectReason); 0: none given.
	Reason uint32 `json:",omitempty"`
	// KeyBits is the width of a token's key in the daemon's token table:
	// a client chooses the keys of the tokens its Binds and
	// FastRegisters give (records.go, Send), and keeps the index.
	KeyBits int `json:",omitempty"`
	Depth   int `json:",omitempty"`
	// RejReason and RejData are a failed connect's or accept's CM REJ (the
	// reason, IBTA table 108, and its private data), so that the client's
	// error carries an ndk.RejectError as in process.
	RejReason uint16 `json:",omitempty"`
	RejData   []byte `json:",omitempty"`
	// The UD extension (ud.go): a UDDestReply's Q_Key, a UD QP's
	// datagram size, a UD service's count of answers.
	QKey       uint32 `json:"qkey,omitempty"`
	MaxMessage uint32 `json:"max_message,omitempty"`
	Answered   uint64 `json:"answered,omitempty"`
}

// Segment is the layout of a shared segment: its size and, by kind, the
// rings in it.
type Segment struct {
	Size      int `json:"size"`
	SendSlots int `json:"send,omitempty"` // QP: send ring slots
	RecvSlots int `json:"recv,omitempty"` // QP: receive ring slots
	Slots     int `json:"slots,omitempty"`
}

// Decode parses one client message, refusing what is not a request.
func Decode(b []byte) (*Request, error) {
	var r Request
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("control message: %w", err)
	}
	if r.Op == "" {
		return nil, fmt.Errorf("control message without op")
	}
	return &r, nil
}

var le = binary.LittleEndian
