package proto

import (
	"github.com/ndkxdp/ndkxdp/ndk/internal/shm"
)

// MaxSGE and MaxInline bound a work record, as they bound the engine's WQE.
const (
	MaxSGE    = 16
	MaxInline = 256
)

// SGE is one scatter/gather element of a record: the client's address, the
// length and the local token, as ndk.SGE.
type SGE struct {
	Addr   uint64
	Length uint32
	Token  uint32
}

// Send is an initiator work record (send ring). Seq numbers the client's
// posts on the QP; the completion carries it back.
//
// The local operations (Op OpBind, OpFastRegister, OpInvalidate: rc.Op's
// values) use the fields so:
//
//	Bind           Handle: the MW; InvToken: the MR's local token;
//	               RemoteAddr, Length: the window; RemoteToken: the
//	               window's new token (the client chose its key)
//	FastRegister   Handle: the fast MR; Arena, ArenaOff: where the memory
//	               lies; RemoteAddr: its address in the client; Length;
//	               InvToken, RemoteToken: the new local and remote tokens
//	Invalidate     InvToken: the token to revoke
//
// Flags carry the rights (ALLOW_*, RDMA_READ_SINK) of Bind and
// FastRegister. Handles are the session's; the daemon resolves each one
// and refuses another session's, and checks every token against the
// QP's protection domain.
type Send struct {
	Op          uint8
	NSGE        uint8
	Flags       uint32
	Seq         uint64
	RemoteAddr  uint64
	RemoteToken uint32
	InvToken    uint32
	Compare     uint64
	SwapAdd     uint64
	InlineLen   uint32
	Handle      uint32
	Arena       uint32
	Length      uint64 // Bind, FastRegister (SwapAdd's bytes)
	ArenaOff    uint64 // FastRegister (Compare's bytes)
	Imm         uint32 // OpSendImm, OpWriteImm: the immediate data
	Dest        UDDest // a UD QP's OpSend, OpSendImm: where it goes (ud.go)
	SGL         [MaxSGE]SGE
	Inline      [MaxInline]byte
}

// Byte layout of a Send record.
const (
	sendOp, sendNSGE, sendFlags, sendSeq       = 0, 1, 4, 8
	sendRAddr, sendRToken, sendInv, sendCmp    = 16, 24, 28, 32
	sendSwap, sendInlineLen, sendSGL, sendData = 40, 48, 64, 64 + MaxSGE*16
	sendHandle, sendArena, sendImm             = 52, 56, 60
	// SendSize is a Send record's bytes.
	SendSize = sendData + MaxInline
)

// Encode writes s into a slot of SendSize bytes.
func (s *Send) Encode(b []byte) {
	b = b[:SendSize]
	b[sendOp], b[sendNSGE] = s.Op, s.NSGE
	le.PutUint32(b[sendFlags:], s.Flags)
	le.PutUint64(b[sendSeq:], s.Seq)
	le.PutUint64(b[sendRAddr:], s.RemoteAddr)
	le.PutUint32(b[sendRToken:], s.RemoteToken)
	le.PutUint32(b[sendInv:], s.InvToken)
	le.PutUint64(b[sendCmp:], s.Compare)
	le.PutUint64(b[sendSwap:], s.SwapAdd)
	le.PutUint32(b[sendInlineLen:], s.InlineLen)
	le.PutUint32(b[sendHandle:], s.Handle)
	le.PutUint32(b[sendArena:], s.Arena)
	le.PutUint32(b[sendImm:], s.Imm)
	if s.Op >= OpFastRegister && s.Op <= OpInvalidate {
		le.PutUint64(b[sendCmp:], s.ArenaOff)
		le.PutUint64(b[sendSwap:], s.Length)
	}
	s.Dest.encode(b)
	putSGL(b[sendSGL:], s.SGL[:min(int(s.NSGE), MaxSGE)])
	if s.InlineLen > 0 {
		copy(b[sendData:], s.Inline[:min(s.InlineLen, MaxInline)])
	}
}

// Decode reads a Send record. It takes the bytes as they are (a hostile
// client may write anything): the caller checks NSGE, InlineLen and Op.
func (s *Send) Decode(b []byte) {
	b = b[:SendSize]
	s.Op, s.NSGE = b[sendOp], b[sendNSGE]
	s.Flags = le.Uint32(b[sendFlags:])
	s.Seq = le.Uint64(b[sendSeq:])
	s.RemoteAddr = le.Uint64(b[sendRAddr:])
	s.RemoteToken = le.Uint32(b[sendRToken:])
	s.InvToken = le.Uint32(b[sendInv:])
	s.Compare = le.Uint64(b[sendCmp:])
	s.SwapAdd = le.Uint64(b[sendSwap:])
	s.InlineLen = le.Uint32(b[sendInlineLen:])
	s.Handle = le.Uint32(b[sendHandle:])
	s.Arena = le.Uint32(b[sendArena:])
	s.Imm = le.Uint32(b[sendImm:])
	s.ArenaOff, s.Length = s.Compare, s.SwapAdd
	s.Dest.decode(b)
	getSGL(b[sendSGL:], s.SGL[:min(int(s.NSGE), MaxSGE)])
	if n := min(s.InlineLen, MaxInline); n > 0 {
		copy(s.Inline[:n], b[sendData:])
	}
}

// Recv is a receive work record (receive ring).
type Recv struct {
	Seq  uint64
	NSGE uint8
	SGL  [MaxSGE]SGE
}

const (
	recvSeq, recvNSGE, recvSGL = 0, 8, 16
	// RecvSize is a Recv record's bytes.
	RecvSize = recvSGL + MaxSGE*16
)

// Encode writes r into a slot of RecvSize bytes.
func (r *Recv) Encode(b []byte) {
	b = b[:RecvSize]
	le.PutUint64(b[recvSeq:], r.Seq)
	b[recvNSGE] = r.NSGE
	putSGL(b[recvSGL:], r.SGL[:min(int(r.NSGE), MaxSGE)])
}

// Decode reads a Recv record; the caller checks NSGE.
func (r *Recv) Decode(b []byte) {
	b = b[:RecvSize]
	r.Seq = le.Uint64(b[recvSeq:])
	r.NSGE = b[recvNSGE]
	getSGL(b[recvSGL:], r.SGL[:min(int(r.NSGE), MaxSGE)])
}

func putSGL(b []byte, sgl []SGE) {
	for i := range sgl {
		o := i * 16
		le.PutUint64(b[o:], sgl[i].Addr)
		le.PutUint32(b[o+8:], sgl[i].Length)
		le.PutUint32(b[o+12:], sgl[i].Token)
	}
}

func getSGL(b []byte, sgl []SGE) {
	for i := range sgl {
		o := i * 16
		sgl[i] = SGE{Addr: le.Uint64(b[o:]), Length: le.Uint32(b[o+8:]), Token: le.Uint32(b[o+12:])}
	}
}

// Send record operations (Send.Op): the data ones, then the local ones.
// They are the engine's rc.Op values, which ndk checks at compile time.
const (
	OpSend           = 1
	OpSendInvalidate = 2
	OpWrite          = 3
	OpRead           = 4
	OpCompareSwap    = 5
	OpFetchAdd       = 6
	OpFastRegister   = 7
	OpBind           = 8
	OpInvalidate     = 9
	// OpSendImm and OpWriteImm are OpSend and OpWrite with immediate data
	// (Send.Imm): an ndkxdp extension, after the local operations.
	OpSendImm  = 10
	OpWriteImm = 11
)

// Completion kinds: which work ring the completed request came from.
const (
	KindSend = 1
	KindRecv = 2
	KindSRQ  = 3 // the receiving QP's SRQ ring
)

// Completion is one entry of a CQ ring: NDK_RESULT_EX with the QP handle
// and the request's sequence number in place of the contexts, which stay
// in the client.
type Completion struct {
	Status            uint32
	Bytes             uint32
	Type              uint32
	ProviderErrorCode uint32
	TypeSpecific      uint64
	Seq               uint64
	QP                uint32
	Kind              uint8
	// Flags: CompletionWithImmediate when Immediate holds the ImmDt of
	// the SEND or WRITE with immediate that the receive completed.
	Flags     uint8
	Immediate uint32
}

// CompletionWithImmediate is the Completion flag of a receive that
// carried immediate data.
const CompletionWithImmediate = 1

// CompletionSize is a Completion record's bytes.
const CompletionSize = 48

// Encode writes c into a slot of CompletionSize bytes.
func (c *Completion) Encode(b []byte) {
	b = b[:CompletionSize]
	le.PutUint32(b[0:], c.Status)
	le.PutUint32(b[4:], c.Bytes)
	le.PutUint32(b[8:], c.Type)
	le.PutUint32(b[12:], c.ProviderErrorCode)
	le.PutUint64(b[16:], c.TypeSpecific)
	le.PutUint64(b[24:], c.Seq)
	le.PutUint32(b[32:], c.QP)
	b[36] = c.Kind
	b[37] = c.Flags
	le.PutUint32(b[40:], c.Immediate)
}

// Decode reads a Completion record.
func (c *Completion) Decode(b []byte) {
	b = b[:CompletionSize]
	c.Status = le.Uint32(b[0:])
	c.Bytes = le.Uint32(b[4:])
	c.Type = le.Uint32(b[8:])
	c.ProviderErrorCode = le.Uint32(b[12:])
	c.TypeSpecific = le.Uint64(b[16:])
	c.Seq = le.Uint64(b[24:])
	c.QP = le.Uint32(b[32:])
	c.Kind = b[36]
	c.Flags = b[37]
	c.Immediate = le.Uint32(b[40:])
}

// SRQLayout is where an SRQ's receive ring and shared words lie in its
// segment: the post hint (uint32 at +0, the client sets it to 1 after it
// publishes records; the relay clears it and serves the ring), the count
// of the SRQ's receives completed (uint64 at +8, daemon-written: the
// client's depth check), then the ring of Recv records.
type SRQLayout struct {
	Words int
	Ring  shm.RingLayout
	Size  int
}

// NewSRQLayout lays out an SRQ segment for a ring of slots entries.
func NewSRQLayout(slots int) SRQLayout {
	l := SRQLayout{Words: 0, Ring: shm.RingLayout{Offset: shm.CacheLine, SlotSize: RecvSize, Slots: slots}}
	l.Size = l.Ring.End()
	return l
}

// Slots returns the ring size for a queue depth: the next power of two.
func Slots(depth int) int {
	n := 1
	for n < depth {
		n <<= 1
	}
	return n
}

// QPLayout is where a QP's rings and shared words lie in its segment.
type QPLayout struct {
	Send, Recv shm.RingLayout
	// Words, daemon-written: the QP's state (uint32: QPFailed once the
	// daemon's QP left the connected state for good) at +8, and how many
	// of the client's send and receive records are no longer outstanding
	// (uint64 each: taken from the ring and retired or refused) at +16
	// and +24, by which the client holds the QP to its depth.
	// Client-written: the write arm (uint32, set to 1; the daemon clears
	// it when it fires) at +12 and the peer-WRITE count it was armed at
	// (uint64) at +40. (Each queue's peer-WRITE count is in the session
	// segment.)
	Words int
	Size  int
}

// QPFailed is the state word of a QP whose daemon QP is in error.
const QPFailed = 1

// NewQPLayout lays out a QP segment for ring sizes given in slots.
func NewQPLayout(sendSlots, recvSlots int) QPLayout {
	var l QPLayout
	l.Send = shm.RingLayout{Offset: 0, SlotSize: SendSize, Slots: sendSlots}
	l.Recv = shm.RingLayout{Offset: l.Send.End(), SlotSize: RecvSize, Slots: recvSlots}
	l.Words = l.Recv.End()
	l.Size = l.Words + shm.CacheLine
	return l
}

// CQLayout is where a CQ's ring and shared words lie in its segment: the
// arm word (uint32, client sets, daemon clears) at +0 and the CQ error
// status (uint32, daemon-written) at +4, then the ring. A resize gives the
// CQ a new segment of the same layout for its ring; the arm and status
// words stay in the first. The sealed word (uint32, daemon-written) at +8
// of a ring's segment turns 1 once the relay moves no more completions
// into that ring: the client drains it, then takes the new one. At +12
// and +16 of the first segment (uint32, daemon-written) the relay counts
// the completions it moved (stored before it reads the arm) and the count
// at its last notification: a client whose arm finds them equal and no
// error has nothing an arm could fire on now, and leaves the engine
// asleep; the relay sees the arm when it next moves a completion.
type CQLayout struct {
	Words int
	Ring  shm.RingLayout
	Size  int
}

// NewCQLayout lays out a CQ segment for a ring of slots entries.
func NewCQLayout(slots int) CQLayout {
	l := CQLayout{Words: 0, Ring: shm.RingLayout{Offset: shm.CacheLine, SlotSize: 64, Slots: slots}}
	l.Size = l.Ring.End()
	return l
}

// A session segment (daemon-created, one per client) holds what the relay
// publishes for every QP at once and the hints that spare it a scan of
// every QP in each turn of the engine:
//
//	+0            peer WRITE packets placed, one uint64 per queue
//	              (MaxQueues), daemon-written: QP.PeerWrites
//	+PostBitmap   one bit per QP slot, set by the client after it
//	              publishes records without DEFER; the relay swaps each
//	              word to 0 and serves the QPs whose bits were set
//	+ArmBitmap    one bit per QP slot, set by the client after it arms
//	              ArmPeerWrites; the relay watches those QPs
//	+EventBell    the doorbell of the client's event reader: the client
//	              sends its eventfd with its hello and sleeps on it
//	+Events       a ring of Event records (relay produces, the client's
//	              reader consumes): CQ notifications and fired write arms,
//	              which reach the client with no message on the socket
//	+RelayBell    the doorbell of the session's relay: the client rings
//	              it after a post or an arm, with the eventfd of the
//	              hello's reply; the engine sleeps on it. It is the
//	              session's own, as is every word here: nothing a client
//	              writes is read on behalf of another session
const (
	MaxQueues   = 64
	MaxQPSlots  = 1 << 16
	PostBitmap  = MaxQueues * 8
	ArmBitmap   = PostBitmap + MaxQPSlots/8
	EventBell   = ArmBitmap + MaxQPSlots/8
	Events      = EventBell + shm.DoorbellSize
	EventSlots  = 4096
	RelayBell   = (Events + shm.RingHeaderSize + EventSlots*EventSize + shm.CacheLine - 1) &^ (shm.CacheLine - 1)
	SessionSize = RelayBell + shm.DoorbellSize
	bitmapWords = MaxQPSlots / 64
)

// SlotWord returns the word index and bit of QP slot s in a bitmap.
func SlotWord(s int) (int, uint64) { return s / 64, 1 << (s % 64) }

// BitmapWords is the number of uint64 words in each bitmap.
const BitmapWords = bitmapWords

// MaxSlots bounds any ring the daemon lays out.
const MaxSlots = 1 << 16

// Event kinds in the session's event ring.
const (
	EventCQ        = 1 // a CQ notification: H the CQ, Status the CQ's status
	EventPeerWrite = 2 // a fired write arm: H the QP
)

// Event is one record of the session's event ring.
type Event struct {
	Kind   uint8
	Status uint32
	H      uint32
}

// EventSize is an Event record's bytes.
const EventSize = 16

// EventRing is where the event ring lies in the session segment.
var EventRing = shm.RingLayout{Offset: Events, SlotSize: EventSize, Slots: EventSlots}

// Encode writes e into a slot of EventSize bytes.
func (e *Event) Encode(b []byte) {
	b = b[:EventSize]
	b[0] = e.Kind
	le.PutUint32(b[4:], e.Status)
	le.PutUint32(b[8:], e.H)
}

// Decode reads an Event record.
func (e *Event) Decode(b []byte) {
	b = b[:EventSize]
	e.Kind, e.Status, e.H = b[0], le.Uint32(b[4:]), le.Uint32(b[8:])
}
