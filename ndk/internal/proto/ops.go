package proto

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// The operations as types: each request names its operation (Op) and the
// type of its answer (Call's type parameter), so that a client's call and
// the daemon's handler agree on both at compile time. A request's fields
// carry the names Request gives them on the wire, and a reply's those
// Message gives them (ops_test.go pins both): typed and hand-built
// messages are one protocol.
//
// A message is an envelope, {"id":N,"op":"create_cq"} for a request and
// {"id":N} for a reply, with the fields of the operation's request or
// reply beside id and op (Encode, EncodeReply). A failed request's reply
// is a Message with Status set and no fields of the reply type.

// Call is a request whose successful answer is a P. Only this package's
// request types are Calls.
type Call[P any] interface {
	// Op is the operation's name on the wire.
	Op() string
	answer(*P)
}

// None is the answer of a request that answers with its status alone.
type None struct{}

// Deadline is the time a request that may block (a CM exchange: connect,
// accept, disconnect...) has left, in nanoseconds (0: none): the daemon
// gives the request up then, as the client's context would.
type Deadline struct {
	Timeout int64 `json:",omitempty"`
}

// SetTimeout sets the time left, unless the request already has one.
func (d *Deadline) SetTimeout(ns int64) {
	if d.Timeout == 0 {
		d.Timeout = ns
	}
}

// Header is what the daemon reads of every request before its handler
// decodes the rest: the ID it answers, the operation, and a blocking
// request's Deadline.
type Header struct {
	ID      uint64 `json:"id"`
	Op      string `json:"op"`
	Timeout int64  `json:",omitempty"`
}

// DecodeHeader parses the envelope of one client message, refusing what
// is not a request.
func DecodeHeader(b []byte) (Header, error) {
	var h Header
	if err := json.Unmarshal(b, &h); err != nil {
		return h, fmt.Errorf("control message: %w", err)
	}
	if h.Op == "" {
		return h, fmt.Errorf("control message without op")
	}
	return h, nil
}

// Encode is the message of request req with ID id: the envelope and
// req's fields.
func Encode(id uint64, op string, req any) ([]byte, error) {
	name, err := json.Marshal(op) // JSON's quoting, not Go's
	if err != nil {
		return nil, err
	}
	b := append([]byte(`{"id":`), strconv.FormatUint(id, 10)...)
	b = append(b, `,"op":`...)
	b = append(b, name...)
	return splice(b, req)
}

// EncodeReply is the successful answer to request id: the envelope and
// rep's fields (none when rep is nil).
func EncodeReply(id uint64, rep any) ([]byte, error) {
	b := append([]byte(`{"id":`), strconv.FormatUint(id, 10)...)
	return splice(b, rep)
}

// splice closes envelope b with the fields of v's JSON object.
func splice(b []byte, v any) ([]byte, error) {
	if v == nil {
		return append(b, '}'), nil
	}
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if len(body) < 2 || body[0] != '{' {
		return nil, fmt.Errorf("message body %T is not an object", v)
	}
	if len(body) == 2 {
		return append(b, '}'), nil
	}
	b = append(b, ',')
	return append(b, body[1:]...), nil
}

// Session.

// Hello is the first message: the client's protocol version; with it the
// client's eventfd (the descriptor the daemon rings for its events).
type Hello struct {
	Version int `json:"version,omitempty"`
}

// HelloReply is the daemon's version, its adapter (AdapterInfo as JSON in
// Raw) and the session segment; with it the relay's eventfd and the
// segment's memfd.
type HelloReply struct {
	Seg     *Segment        `json:",omitempty"`
	Addr    string          `json:",omitempty"`
	MAC     string          `json:",omitempty"`
	PathMTU int             `json:",omitempty"`
	Version int             `json:",omitempty"`
	Raw     json.RawMessage `json:",omitempty"`
}

// Arena lends the daemon client memory: a memfd of Size bytes sent
// with it, known as Arena in later requests.
type Arena struct {
	Arena uint32 `json:",omitempty"`
	Size  uint64 `json:",omitempty"`
}

// Cancel gives up the blocking request Target; it has no answer (the
// target answers, cancelled or not).
type Cancel struct {
	Target uint64 `json:",omitempty"`
}

// Stats asks for the adapter's counters.
type Stats struct{}

// StatsReply is ndk.Stats (Raw) and ndk.CMStats (Raw2) as JSON.
type StatsReply struct {
	Raw, Raw2 json.RawMessage `json:",omitempty"`
}

// Completion queues.

// CreateCQ is NdkCreateCq of Depth entries.
type CreateCQ struct {
	Depth int `json:",omitempty"`
}

// CQReply is a new CQ: its handle and segment (its memfd sent along).
type CQReply struct {
	H   uint32   `json:",omitempty"`
	Seg *Segment `json:",omitempty"`
}

// CloseCQ closes CQ H.
type CloseCQ struct {
	H uint32 `json:"h,omitempty"`
}

// ResizeCQ is NdkResizeCq of H to Depth.
type ResizeCQ struct {
	H     uint32 `json:"h,omitempty"`
	Depth int    `json:",omitempty"`
}

// ResizeCQReply is the new ring's segment (its memfd sent along).
type ResizeCQReply struct {
	Seg *Segment `json:",omitempty"`
}

// ModerateCQ bounds H's notifications: Timeout is the interval (ns; 0:
// none) and Depth the count (0: none), the bounds the client computed
// from NDKPI's values.
type ModerateCQ struct {
	H       uint32 `json:"h,omitempty"`
	Depth   int    `json:",omitempty"`
	Timeout int64  `json:",omitempty"`
}

// Protection domains and memory.

// CreatePD is NdkCreatePd.
type CreatePD struct{}

// Handle is the answer of a request that makes an object: its handle.
type Handle struct {
	H uint32 `json:",omitempty"`
}

// ClosePD closes PD H; EvPDClosed follows when its MRs are gone.
type ClosePD struct {
	H uint32 `json:"h,omitempty"`
}

// Register is NdkRegisterMr of Len bytes at Off in arena Arena, at
// virtual address VA.
type Register struct {
	PD            uint32 `json:"pd,omitempty"`
	Flags         uint32
	Invalidatable bool   `json:",omitempty"`
	Arena         uint32 `json:",omitempty"`
	Off           uint64 `json:",omitempty"`
	Len           uint64 `json:",omitempty"`
	VA            uint64 `json:",omitempty"`
}

// TokensReply is a new MR or MW: its handle and tokens, and (MWs, fast
// MRs) the width of a token's key in the daemon's table.
type TokensReply struct {
	H       uint32 `json:",omitempty"`
	Local   uint32 `json:",omitempty"`
	Remote  uint32 `json:",omitempty"`
	KeyBits int    `json:",omitempty"`
}

// Deregister is NdkDeregisterMr of H.
type Deregister struct {
	H uint32 `json:"h,omitempty"`
}

// CreateMW is NdkCreateMw on PD.
type CreateMW struct {
	PD uint32 `json:"pd,omitempty"`
}

// CloseMW closes MW H.
type CloseMW struct {
	H uint32 `json:"h,omitempty"`
}

// InitFastMR is NdkCreateMr(FastRegister) on PD when H is 0, then
// NdkInitializeFastRegisterMr of Depth pages; Flags 1: remote access.
type InitFastMR struct {
	H     uint32 `json:"h,omitempty"`
	PD    uint32 `json:"pd,omitempty"`
	Depth int    `json:",omitempty"`
	Flags uint32
}

// Shared receive queues.

// CreateSRQ is NdkCreateSrq on PD.
type CreateSRQ struct {
	PD        uint32 `json:"pd,omitempty"`
	Depth     int    `json:",omitempty"`
	RecvSGE   int    `json:",omitempty"`
	Threshold int    `json:",omitempty"`
}

// ModifySRQ is NdkModifySrq of H.
type ModifySRQ struct {
	H         uint32 `json:"h,omitempty"`
	Depth     int    `json:",omitempty"`
	Threshold int    `json:",omitempty"`
}

// SRQLen asks how many receives H holds in the daemon.
type SRQLen struct {
	H uint32 `json:"h,omitempty"`
}

// SRQLenReply is that count.
type SRQLenReply struct {
	Depth int `json:",omitempty"`
}

// CloseSRQ closes SRQ H; EvSRQClosed follows.
type CloseSRQ struct {
	H uint32 `json:"h,omitempty"`
}

// Queue pairs.

// CreateQP is NdkCreateQp (NdkCreateQpWithSrq when SRQ is set).
type CreateQP struct {
	PD        uint32 `json:"pd,omitempty"`
	RecvCQ    uint32 `json:"rcq,omitempty"`
	SendCQ    uint32 `json:"scq,omitempty"`
	SRQ       uint32 `json:"srq,omitempty"`
	Depth     int    `json:",omitempty"`
	SendDepth int    `json:",omitempty"`
	RecvSGE   int    `json:",omitempty"`
	SendSGE   int    `json:",omitempty"`
	Inline    int    `json:",omitempty"`
	// UD makes a UD QP (ndk.PD.CreateUDQP) of Q_Key QKey: no SRQ, and
	// each SEND record names its destination (UDDest).
	UD   bool   `json:"ud,omitempty"`
	QKey uint32 `json:"qkey,omitempty"`
	// UC makes an unreliable-connection QP (ndk.QPConfig.UC).
	UC bool `json:"uc,omitempty"`
	// NoSelfLoopback is ndk.QPConfig.BlockSelfMulticastLoopback.
	NoSelfLoopback bool `json:"noselfloop,omitempty"`
}

// QPReply is a new QP: its handle, number, first PSN, engine queue, slot
// in the session's bitmaps and segment (its memfd sent along); a UD QP's
// also the most bytes one datagram carries (ndk.QP.UDMaxMessage).
type QPReply struct {
	H          uint32   `json:",omitempty"`
	Seg        *Segment `json:",omitempty"`
	QPN        uint32   `json:",omitempty"`
	PSN        uint32   `json:",omitempty"`
	Slot       int      `json:",omitempty"`
	Queue      int      `json:",omitempty"`
	MaxMessage uint32   `json:"max_message,omitempty"`
}

// CloseQP closes QP H.
type CloseQP struct {
	H uint32 `json:"h,omitempty"`
}

// FlushQP is NdkFlushQp of H.
type FlushQP struct {
	H uint32 `json:"h,omitempty"`
}

// ConnectOOB connects QP H to the peer Remote without the CM.
type ConnectOOB struct {
	H uint32 `json:"h,omitempty"`
	Deadline
	Remote *Endpoint
	Opts   *ConnOpts
}

// Connection management.

// CreateConnector is NdkCreateConnector.
type CreateConnector struct{}

// ConnReply is a connector's handle (create) and addresses, and (conn
// data) the peer's read limits and private data.
type ConnReply struct {
	H     uint32 `json:",omitempty"`
	IRD   int    `json:",omitempty"`
	ORD   int    `json:",omitempty"`
	Data  []byte `json:",omitempty"`
	Addr  string `json:",omitempty"` // local
	Addr2 string `json:",omitempty"` // peer
}

// Connect is NdkConnect of connector H and QP from Addr (may be empty) to
// Addr2, or NdkConnectWithSharedEndpoint from endpoint SE. Opts carries
// the retry counts only.
type Connect struct {
	H     uint32 `json:"h,omitempty"`
	QP    uint32 `json:"qp,omitempty"`
	SE    uint32 `json:"se,omitempty"`
	Addr  string `json:",omitempty"`
	Addr2 string `json:",omitempty"`
	IRD   int    `json:",omitempty"`
	ORD   int    `json:",omitempty"`
	Data  []byte `json:",omitempty"`
	Deadline
	Opts *ConnOpts
}

// CompleteConnect is NdkCompleteConnect of H.
type CompleteConnect struct {
	H uint32 `json:"h,omitempty"`
	Deadline
}

// Accept is NdkAccept of connector H with QP. Opts carries the retry
// counts only.
type Accept struct {
	H   uint32 `json:"h,omitempty"`
	QP  uint32 `json:"qp,omitempty"`
	IRD int    `json:",omitempty"`
	ORD int    `json:",omitempty"`
	// Data is the private data of the REP.
	Data []byte `json:",omitempty"`
	Deadline
	Opts *ConnOpts
}

// Reject is NdkReject of H with private data Data.
type Reject struct {
	H    uint32 `json:"h,omitempty"`
	Data []byte `json:",omitempty"`
	Deadline
}

// Disconnect is NdkDisconnect of H (NDK_FN_DISCONNECT_EX's Abortive).
type Disconnect struct {
	H uint32 `json:"h,omitempty"`
	Deadline
	Abortive bool `json:",omitempty"`
}

// ConnData is NdkGetConnectionData of H.
type ConnData struct {
	H uint32 `json:"h,omitempty"`
}

// CloseConnector closes H; EvConnectorClosed follows.
type CloseConnector struct {
	H uint32 `json:"h,omitempty"`
}

// CreateListener is NdkCreateListener.
type CreateListener struct{}

// Listen is NdkListen of H on Addr.
type Listen struct {
	H    uint32 `json:"h,omitempty"`
	Addr string `json:",omitempty"`
}

// AddrReply is the address a listener or shared endpoint got.
type AddrReply struct {
	H    uint32 `json:",omitempty"`
	Addr string `json:",omitempty"`
}

// PauseListener is NdkControlConnectEvents of H.
type PauseListener struct {
	H     uint32 `json:"h,omitempty"`
	Pause bool   `json:",omitempty"`
}

// CloseListener closes H; EvListenerClosed follows.
type CloseListener struct {
	H uint32 `json:"h,omitempty"`
}

// CreateEndpoint is NdkCreateSharedEndpoint on Addr.
type CreateEndpoint struct {
	Addr string `json:",omitempty"`
}

// CloseEndpoint closes shared endpoint H.
type CloseEndpoint struct {
	H uint32 `json:"h,omitempty"`
}

// Operator requests: what `ndkxdp status`, `info`, `stats`, `qp` and
// `dump` ask. They need no hello and create nothing.
const (
	OpAdminStatus = "admin_status" // reply Raw: daemon.Status
	OpAdminInfo   = "admin_info"   // reply Raw: daemon.Info
	OpAdminStats  = "admin_stats"  // reply Raw: daemon.Stats
	OpAdminQPs    = "admin_qps"    // reply Raw: []daemon.QP
	OpAdminDump   = "admin_dump"   // Len: snap length; then frame events
)

// AdminStatus, AdminInfo, AdminStats and AdminQPs ask for an operator's
// report, answered as JSON in Report.Raw.
type (
	AdminStatus struct{}
	AdminInfo   struct{}
	AdminStats  struct{}
	AdminQPs    struct{}
)

// Report is an operator's report.
type Report struct {
	Raw json.RawMessage `json:",omitempty"`
}

// AdminDump starts a live capture keeping Len bytes of each frame (0:
// the daemon's default); its frames follow as events.
type AdminDump struct {
	Len uint64 `json:",omitempty"`
}

func (*Hello) Op() string           { return OpHello }
func (*Arena) Op() string           { return OpArena }
func (*Cancel) Op() string          { return OpCancel }
func (*Stats) Op() string           { return OpStats }
func (*CreateCQ) Op() string        { return OpCreateCQ }
func (*CloseCQ) Op() string         { return OpCloseCQ }
func (*ResizeCQ) Op() string        { return OpResizeCQ }
func (*ModerateCQ) Op() string      { return OpModerateCQ }
func (*CreatePD) Op() string        { return OpCreatePD }
func (*ClosePD) Op() string         { return OpClosePD }
func (*Register) Op() string        { return OpRegister }
func (*Deregister) Op() string      { return OpDeregister }
func (*CreateMW) Op() string        { return OpCreateMW }
func (*CloseMW) Op() string         { return OpCloseMW }
func (*InitFastMR) Op() string      { return OpInitFastMR }
func (*CreateSRQ) Op() string       { return OpCreateSRQ }
func (*ModifySRQ) Op() string       { return OpModifySRQ }
func (*SRQLen) Op() string          { return OpSRQLen }
func (*CloseSRQ) Op() string        { return OpCloseSRQ }
func (*CreateQP) Op() string        { return OpCreateQP }
func (*CloseQP) Op() string         { return OpCloseQP }
func (*FlushQP) Op() string         { return OpFlushQP }
func (*ConnectOOB) Op() string      { return OpConnectOOB }
func (*CreateConnector) Op() string { return OpCreateConnector }
func (*Connect) Op() string         { return OpConnect }
func (*CompleteConnect) Op() string { return OpCompleteConnect }
func (*Accept) Op() string          { return OpAccept }
func (*Reject) Op() string          { return OpReject }
func (*Disconnect) Op() string      { return OpDisconnect }
func (*ConnData) Op() string        { return OpConnData }
func (*CloseConnector) Op() string  { return OpCloseConnector }
func (*CreateListener) Op() string  { return OpCreateListener }
func (*Listen) Op() string          { return OpListen }
func (*PauseListener) Op() string   { return OpPauseListener }
func (*CloseListener) Op() string   { return OpCloseListener }
func (*CreateEndpoint) Op() string  { return OpCreateEndpoint }
func (*CloseEndpoint) Op() string   { return OpCloseEndpoint }
func (*AdminStatus) Op() string     { return OpAdminStatus }
func (*AdminInfo) Op() string       { return OpAdminInfo }
func (*AdminStats) Op() string      { return OpAdminStats }
func (*AdminQPs) Op() string        { return OpAdminQPs }
func (*AdminDump) Op() string       { return OpAdminDump }

func (*Hello) answer(*HelloReply)          {}
func (*Arena) answer(*None)                {}
func (*Cancel) answer(*None)               {}
func (*Stats) answer(*StatsReply)          {}
func (*CreateCQ) answer(*CQReply)          {}
func (*CloseCQ) answer(*None)              {}
func (*ResizeCQ) answer(*ResizeCQReply)    {}
func (*ModerateCQ) answer(*None)           {}
func (*CreatePD) answer(*Handle)           {}
func (*ClosePD) answer(*None)              {}
func (*Register) answer(*TokensReply)      {}
func (*Deregister) answer(*None)           {}
func (*CreateMW) answer(*TokensReply)      {}
func (*CloseMW) answer(*None)              {}
func (*InitFastMR) answer(*TokensReply)    {}
func (*CreateSRQ) answer(*CQReply)         {}
func (*ModifySRQ) answer(*None)            {}
func (*SRQLen) answer(*SRQLenReply)        {}
func (*CloseSRQ) answer(*None)             {}
func (*CreateQP) answer(*QPReply)          {}
func (*CloseQP) answer(*None)              {}
func (*FlushQP) answer(*None)              {}
func (*ConnectOOB) answer(*None)           {}
func (*CreateConnector) answer(*ConnReply) {}
func (*Connect) answer(*ConnReply)         {}
func (*CompleteConnect) answer(*None)      {}
func (*Accept) answer(*ConnReply)          {}
func (*Reject) answer(*None)               {}
func (*Disconnect) answer(*None)           {}
func (*ConnData) answer(*ConnReply)        {}
func (*CloseConnector) answer(*None)       {}
func (*CreateListener) answer(*Handle)     {}
func (*Listen) answer(*AddrReply)          {}
func (*PauseListener) answer(*None)        {}
func (*CloseListener) answer(*None)        {}
func (*CreateEndpoint) answer(*AddrReply)  {}
func (*CloseEndpoint) answer(*None)        {}
func (*AdminStatus) answer(*Report)        {}
func (*AdminInfo) answer(*Report)          {}
func (*AdminStats) answer(*Report)         {}
func (*AdminQPs) answer(*Report)           {}
func (*AdminDump) answer(*None)            {}
