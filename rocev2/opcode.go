package rocev2

import "strconv"

// Opcode is the BTH OpCode: the top three bits select the transport, the low
// five the operation (IBTA 9.2.1; torvalds/linux include/rdma/ib_pack.h).
type Opcode uint8

// Transport is the transport-service prefix of an Opcode.
type Transport uint8

// Transport prefixes.
const (
	TransportRC  Transport = 0x00
	TransportUC  Transport = 0x20
	TransportRD  Transport = 0x40
	TransportUD  Transport = 0x60
	TransportCNP Transport = 0x80
)

func (t Transport) String() string {
	switch t {
	case TransportRC:
		return "RC"
	case TransportUC:
		return "UC"
	case TransportRD:
		return "RD"
	case TransportUD:
		return "UD"
	case TransportCNP:
		return "CNP"
	}
	return "transport(0x" + strconv.FormatUint(uint64(t), 16) + ")"
}

// Operation codes, transport prefix included.
const (
	RCSendFirst          Opcode = 0x00
	RCSendMiddle         Opcode = 0x01
	RCSendLast           Opcode = 0x02
	RCSendLastImm        Opcode = 0x03
	RCSendOnly           Opcode = 0x04
	RCSendOnlyImm        Opcode = 0x05
	RCWriteFirst         Opcode = 0x06
	RCWriteMiddle        Opcode = 0x07
	RCWriteLast          Opcode = 0x08
	RCWriteLastImm       Opcode = 0x09
	RCWriteOnly          Opcode = 0x0A
	RCWriteOnlyImm       Opcode = 0x0B
	RCReadRequest        Opcode = 0x0C
	RCReadResponseFirst  Opcode = 0x0D
	RCReadResponseMiddle Opcode = 0x0E
	RCReadResponseLast   Opcode = 0x0F
	RCReadResponseOnly   Opcode = 0x10
	RCAck                Opcode = 0x11
	RCAtomicAck          Opcode = 0x12
	RCCompareSwap        Opcode = 0x13
	RCFetchAdd           Opcode = 0x14
	RCSendLastInvalidate Opcode = 0x16
	RCSendOnlyInvalidate Opcode = 0x17
	RCFlush              Opcode = 0x1C
	RCAtomicWrite        Opcode = 0x1D
	UCSendFirst          Opcode = 0x20
	UCSendMiddle         Opcode = 0x21
	UCSendLast           Opcode = 0x22
	UCSendLastImm        Opcode = 0x23
	UCSendOnly           Opcode = 0x24
	UCSendOnlyImm        Opcode = 0x25
	UCWriteFirst         Opcode = 0x26
	UCWriteMiddle        Opcode = 0x27
	UCWriteLast          Opcode = 0x28
	UCWriteLastImm       Opcode = 0x29
	UCWriteOnly          Opcode = 0x2A
	UCWriteOnlyImm       Opcode = 0x2B
	UDSendOnly           Opcode = 0x64
	UDSendOnlyImm        Opcode = 0x65
	CNP                  Opcode = 0x81
)

// HeaderSet names the extended transport headers an opcode carries after the
// BTH. They appear on the wire in the order of the bits, lowest first: DETH,
// FETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH (IBTA 9.2; FETH is
// only on FLUSH, where it precedes the RETH, as rxe_opcode.c lays it out).
type HeaderSet uint8

// Extended transport headers.
const (
	HasDETH HeaderSet = 1 << iota
	HasFETH
	HasRETH
	HasAtomicETH
	HasAETH
	HasAtomicAckETH
	HasImmDt
	HasIETH
)

// Len returns the number of bytes the headers in s occupy.
func (s HeaderSet) Len() int {
	n := 0
	if s&HasDETH != 0 {
		n += DETHLen
	}
	if s&HasFETH != 0 {
		n += FETHLen
	}
	if s&HasRETH != 0 {
		n += RETHLen
	}
	if s&HasAtomicETH != 0 {
		n += AtomicETHLen
	}
	if s&HasAETH != 0 {
		n += AETHLen
	}
	if s&HasAtomicAckETH != 0 {
		n += AtomicAckETHLen
	}
	if s&HasImmDt != 0 {
		n += ImmDtLen
	}
	if s&HasIETH != 0 {
		n += IETHLen
	}
	return n
}

// Position is where a packet sits in a message.
type Position uint8

// Positions. A single-packet message is Only (First and Last at once).
const (
	PosFirst  Position = 1
	PosMiddle Position = 2
	PosLast   Position = 4
	PosOnly            = PosFirst | PosLast
)

// OpInfo describes one opcode. The same table drives Parse and Encode.
type OpInfo struct {
	Name    string
	Valid   bool
	Headers HeaderSet
	// HeaderLen is Headers.Len(), precomputed for the per-packet path.
	HeaderLen int
	// Payload reports whether a payload may follow the headers.
	Payload bool
	// FixedPayload, when nonzero, is the exact payload length (CNP: 16
	// reserved bytes; ATOMIC_WRITE: 8 bytes).
	FixedPayload int
	// Padded reports whether PadCnt may be nonzero: only the last packet of a
	// message carries a partial PMTU (IBTA 9.2.2; ROCEV2.md 1.6).
	Padded bool
	// SolicitedEvent reports whether the SE bit may be set: the last or only
	// packet of a SEND or RDMA WRITE with immediate (IBTA 9.2.1, C9-9).
	SolicitedEvent bool
	// Response reports a responder-to-requester packet: READ responses,
	// ACK and ATOMIC_ACK. Everything else is a request (IBTA 9.2).
	Response bool
	Position Position
}

var opTable [256]OpInfo

func init() {
	type op struct {
		code    Opcode
		name    string
		hdr     HeaderSet
		payload bool
		fixed   int
		pos     Position
		se      bool
	}
	// Operations shared by RC and UC at the same low five bits.
	common := []op{
		{0x00, "SEND_FIRST", 0, true, 0, PosFirst, false},
		{0x01, "SEND_MIDDLE", 0, true, 0, PosMiddle, false},
		{0x02, "SEND_LAST", 0, true, 0, PosLast, true},
		{0x03, "SEND_LAST_WITH_IMMEDIATE", HasImmDt, true, 0, PosLast, true},
		{0x04, "SEND_ONLY", 0, true, 0, PosOnly, true},
		{0x05, "SEND_ONLY_WITH_IMMEDIATE", HasImmDt, true, 0, PosOnly, true},
		{0x06, "RDMA_WRITE_FIRST", HasRETH, true, 0, PosFirst, false},
		{0x07, "RDMA_WRITE_MIDDLE", 0, true, 0, PosMiddle, false},
		{0x08, "RDMA_WRITE_LAST", 0, true, 0, PosLast, false},
		{0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", HasImmDt, true, 0, PosLast, true},
		{0x0A, "RDMA_WRITE_ONLY", HasRETH, true, 0, PosOnly, false},
		{0x0B, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", HasRETH | HasImmDt, true, 0, PosOnly, true},
	}
	rcOnly := []op{
		{0x0C, "RDMA_READ_REQUEST", HasRETH, false, 0, PosOnly, false},
		{0x0D, "RDMA_READ_RESPONSE_FIRST", HasAETH, true, 0, PosFirst, false},
		{0x0E, "RDMA_READ_RESPONSE_MIDDLE", 0, true, 0, PosMiddle, false},
		{0x0F, "RDMA_READ_RESPONSE_LAST", HasAETH, true, 0, PosLast, false},
		{0x10, "RDMA_READ_RESPONSE_ONLY", HasAETH, true, 0, PosOnly, false},
		{0x11, "ACKNOWLEDGE", HasAETH, false, 0, PosOnly, false},
		{0x12, "ATOMIC_ACKNOWLEDGE", HasAETH | HasAtomicAckETH, false, 0, PosOnly, false},
		{0x13, "COMPARE_SWAP", HasAtomicETH, false, 0, PosOnly, false},
		{0x14, "FETCH_ADD", HasAtomicETH, false, 0, PosOnly, false},
		{0x16, "SEND_LAST_WITH_INVALIDATE", HasIETH, true, 0, PosLast, true},
		{0x17, "SEND_ONLY_WITH_INVALIDATE", HasIETH, true, 0, PosOnly, true},
		{0x1C, "FLUSH", HasFETH | HasRETH, false, 0, PosOnly, false},
		{0x1D, "ATOMIC_WRITE", HasRETH, true, 8, PosOnly, false},
	}
	add := func(prefix Transport, tname string, o op) {
		code := Opcode(prefix) | o.code
		opTable[code] = OpInfo{
			Name:           tname + "_" + o.name,
			Valid:          true,
			Headers:        o.hdr,
			HeaderLen:      o.hdr.Len(),
			Payload:        o.payload,
			FixedPayload:   o.fixed,
			Padded:         o.payload && o.fixed == 0 && o.pos&PosLast != 0,
			SolicitedEvent: o.se,
			Position:       o.pos,
			Response:       prefix == TransportRC && o.code >= 0x0D && o.code <= 0x12,
		}
	}
	for _, o := range common {
		add(TransportRC, "RC", o)
		add(TransportUC, "UC", o)
	}
	for _, o := range rcOnly {
		add(TransportRC, "RC", o)
	}
	add(TransportUD, "UD", op{0x04, "SEND_ONLY", HasDETH, true, 0, PosOnly, true})
	add(TransportUD, "UD", op{0x05, "SEND_ONLY_WITH_IMMEDIATE", HasDETH | HasImmDt, true, 0, PosOnly, true})
	// CNP (RoCEv2 Annex A17.9.2): BTH then 16 reserved bytes, never padded.
	opTable[CNP] = OpInfo{Name: "CNP", Valid: true, Payload: true, FixedPayload: 16, Position: PosOnly}
}

// Info returns the table entry for o. Info().Valid is false for opcodes
// this package does not speak (RD, XRC, reserved and vendor codes).
func (o Opcode) Info() *OpInfo { return &opTable[o] }

// Valid reports whether o is in the opcode table.
func (o Opcode) Valid() bool { return opTable[o].Valid }

// Transport returns the transport prefix of o.
func (o Opcode) Transport() Transport { return Transport(o & 0xE0) }

func (o Opcode) String() string {
	if opTable[o].Valid {
		return opTable[o].Name
	}
	return "opcode(0x" + strconv.FormatUint(uint64(o), 16) + ")"
}
