package rocev2

import "encoding/binary"

// Transport header sizes in bytes (ROCEV2.md 1.2, 1.3; rxe_hdr.h).
const (
	BTHLen          = 12
	DETHLen         = 8
	FETHLen         = 4
	RETHLen         = 16
	AtomicETHLen    = 28
	AETHLen         = 4
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
	ICRCLen         = 4
)

// DefaultPKey is the default partition key; RoCE peers send it on every packet.
const DefaultPKey = 0xFFFF

// BTH is the Base Transport Header, a view over 12 bytes.
//
//	byte 0     OpCode
//	byte 1     SE(7) M(6) PadCnt(5:4) TVer(3:0)
//	bytes 2-3  P_Key
//	byte 4     FECN(7) BECN(6) resv6(5:0)
//	bytes 5-7  DestQP
//	byte 8     AckReq(7) resv7(6:0)
//	bytes 9-11 PSN
type BTH []byte

// BTHFields holds every bit of a BTH, reserved ones included, so that a
// parsed header re-encodes to the same bytes.
type BTHFields struct {
	Opcode Opcode
	SE     bool
	// MigReq is passed through; Huawei hardware sets it, rxe does not.
	MigReq bool
	PadCnt uint8
	TVer   uint8
	PKey   uint16
	FECN   bool
	BECN   bool
	Resv6  uint8
	DestQP uint32
	AckReq bool
	Resv7  uint8
	PSN    PSN
}

// Opcode returns the operation code.
func (b BTH) Opcode() Opcode { return Opcode(b[0]) }

// SE reports the solicited-event bit.
func (b BTH) SE() bool { return b[1]&0x80 != 0 }

// MigReq reports the migration-request bit.
func (b BTH) MigReq() bool { return b[1]&0x40 != 0 }

// PadCnt returns the number of pad bytes before the ICRC.
func (b BTH) PadCnt() uint8 { return b[1] >> 4 & 3 }

// TVer returns the transport header version (0).
func (b BTH) TVer() uint8 { return b[1] & 0x0F }

// PKey returns the partition key.
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[2:]) }

// FECN reports forward congestion notification.
func (b BTH) FECN() bool { return b[4]&0x80 != 0 }

// BECN reports backward congestion notification.
func (b BTH) BECN() bool { return b[4]&0x40 != 0 }

// Resv6 returns the six reserved bits of byte 4.
func (b BTH) Resv6() uint8 { return b[4] & 0x3F }

// DestQP returns the 24-bit destination QP.
func (b BTH) DestQP() uint32 { return uint24(b[5:]) }

// AckReq reports whether the sender asks for an acknowledgement.
func (b BTH) AckReq() bool { return b[8]&0x80 != 0 }

// Resv7 returns the seven reserved bits of byte 8.
func (b BTH) Resv7() uint8 { return b[8] & 0x7F }

// PSN returns the packet sequence number.
func (b BTH) PSN() PSN { return PSN(uint24(b[9:])) }

// SetOpcode sets the operation code.
func (b BTH) SetOpcode(o Opcode) { b[0] = byte(o) }

// SetSE sets the solicited-event bit.
func (b BTH) SetSE(v bool) { b[1] = setBit(b[1], 0x80, v) }

// SetMigReq sets the migration-request bit.
func (b BTH) SetMigReq(v bool) { b[1] = setBit(b[1], 0x40, v) }

// SetPadCnt sets the pad count (two bits).
func (b BTH) SetPadCnt(n uint8) { b[1] = b[1]&^0x30 | (n&3)<<4 }

// SetTVer sets the transport header version.
func (b BTH) SetTVer(v uint8) { b[1] = b[1]&^0x0F | v&0x0F }

// SetPKey sets the partition key.
func (b BTH) SetPKey(k uint16) { binary.BigEndian.PutUint16(b[2:], k) }

// SetFECN sets forward congestion notification.
func (b BTH) SetFECN(v bool) { b[4] = setBit(b[4], 0x80, v) }

// SetBECN sets backward congestion notification.
func (b BTH) SetBECN(v bool) { b[4] = setBit(b[4], 0x40, v) }

// SetDestQP sets the destination QP (24 bits).
func (b BTH) SetDestQP(qp uint32) { putUint24(b[5:], qp) }

// SetAckReq sets the acknowledge-request bit.
func (b BTH) SetAckReq(v bool) { b[8] = setBit(b[8], 0x80, v) }

// SetPSN sets the packet sequence number.
func (b BTH) SetPSN(p PSN) { putUint24(b[9:], uint32(p)) }

// Fields decodes every field of b.
func (b BTH) Fields() BTHFields {
	var f BTHFields
	b.decode(&f)
	return f
}

// decode is Fields into f. Parse uses it to fill its Packet in place: a
// returned BTHFields comes back through the stack, and copying it from
// there stalls on the callee's narrower stores.
func (b BTH) decode(f *BTHFields) {
	_ = b[11]
	f.Opcode, f.SE, f.MigReq, f.PadCnt, f.TVer = b.Opcode(), b.SE(), b.MigReq(), b.PadCnt(), b.TVer()
	f.PKey, f.FECN, f.BECN, f.Resv6, f.DestQP = b.PKey(), b.FECN(), b.BECN(), b.Resv6(), b.DestQP()
	f.AckReq, f.Resv7, f.PSN = b.AckReq(), b.Resv7(), b.PSN()
}

// Encode writes f into b. DestQP and PSN are truncated to 24 bits.
func (b BTH) Encode(f *BTHFields) {
	_ = b[11]
	b[0] = byte(f.Opcode)
	b[1] = boolBit(f.SE, 0x80) | boolBit(f.MigReq, 0x40) | (f.PadCnt&3)<<4 | f.TVer&0x0F
	binary.BigEndian.PutUint16(b[2:], f.PKey)
	b[4] = boolBit(f.FECN, 0x80) | boolBit(f.BECN, 0x40) | f.Resv6&0x3F
	putUint24(b[5:], f.DestQP)
	b[8] = boolBit(f.AckReq, 0x80) | f.Resv7&0x7F
	putUint24(b[9:], uint32(f.PSN))
}

// DETH is the Datagram Extended Transport Header of UD packets: Q_Key,
// a reserved byte, and the source QP.
type DETH []byte

// DETHFields holds a DETH.
type DETHFields struct {
	QKey  uint32
	Resv8 uint8
	SrcQP uint32
}

// QKey returns the queue key.
func (d DETH) QKey() uint32 { return binary.BigEndian.Uint32(d) }

// SrcQP returns the 24-bit source QP.
func (d DETH) SrcQP() uint32 { return uint24(d[5:]) }

// SetQKey sets the queue key.
func (d DETH) SetQKey(k uint32) { binary.BigEndian.PutUint32(d, k) }

// SetSrcQP sets the source QP (24 bits).
func (d DETH) SetSrcQP(qp uint32) { putUint24(d[5:], qp) }

// Fields decodes d.
func (d DETH) Fields() DETHFields { return DETHFields{QKey: d.QKey(), Resv8: d[4], SrcQP: d.SrcQP()} }

// Encode writes f into d.
func (d DETH) Encode(f *DETHFields) {
	binary.BigEndian.PutUint32(d, f.QKey)
	d[4] = f.Resv8
	putUint24(d[5:], f.SrcQP)
}

// FETH is the FLUSH Extended Transport Header (IBTA Memory Placement
// Extensions): placement type in bits 3:0, selectivity level in bits 5:4.
type FETH []byte

// FETHFields holds a FETH as its raw 32-bit word, reserved bits included.
type FETHFields struct {
	Bits uint32
}

// PlacementType returns bits 3:0.
func (f FETHFields) PlacementType() uint8 { return uint8(f.Bits & 0xF) }

// SelectivityLevel returns bits 5:4.
func (f FETHFields) SelectivityLevel() uint8 { return uint8(f.Bits >> 4 & 3) }

// Fields decodes f.
func (f FETH) Fields() FETHFields { return FETHFields{Bits: binary.BigEndian.Uint32(f)} }

// Encode writes v into f.
func (f FETH) Encode(v *FETHFields) { binary.BigEndian.PutUint32(f, v.Bits) }

// RETH is the RDMA Extended Transport Header: virtual address, R_Key and
// DMA length of an RDMA READ or WRITE.
type RETH []byte

// RETHFields holds a RETH.
type RETHFields struct {
	VA     uint64
	RKey   uint32
	DMALen uint32
}

// VA returns the remote virtual address.
func (r RETH) VA() uint64 { return binary.BigEndian.Uint64(r) }

// RKey returns the remote key.
func (r RETH) RKey() uint32 { return binary.BigEndian.Uint32(r[8:]) }

// DMALen returns the length of the whole RDMA operation.
func (r RETH) DMALen() uint32 { return binary.BigEndian.Uint32(r[12:]) }

// SetVA sets the remote virtual address.
func (r RETH) SetVA(va uint64) { binary.BigEndian.PutUint64(r, va) }

// SetRKey sets the remote key.
func (r RETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(r[8:], k) }

// SetDMALen sets the length of the RDMA operation.
func (r RETH) SetDMALen(n uint32) { binary.BigEndian.PutUint32(r[12:], n) }

// Fields decodes r.
func (r RETH) Fields() RETHFields { return RETHFields{VA: r.VA(), RKey: r.RKey(), DMALen: r.DMALen()} }

// Encode writes f into r.
func (r RETH) Encode(f *RETHFields) {
	binary.BigEndian.PutUint64(r, f.VA)
	binary.BigEndian.PutUint32(r[8:], f.RKey)
	binary.BigEndian.PutUint32(r[12:], f.DMALen)
}

// AtomicETH is the Atomic Extended Transport Header of COMPARE_SWAP and
// FETCH_ADD.
type AtomicETH []byte

// AtomicETHFields holds an AtomicETH. SwapAdd is the swap value of
// COMPARE_SWAP or the addend of FETCH_ADD.
type AtomicETHFields struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64
	Compare uint64
}

// VA returns the remote virtual address (8-byte aligned).
func (a AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(a) }

// RKey returns the remote key.
func (a AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(a[8:]) }

// SwapAdd returns the swap value or addend.
func (a AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(a[12:]) }

// Compare returns the compare value of COMPARE_SWAP.
func (a AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(a[20:]) }

// Fields decodes a.
func (a AtomicETH) Fields() AtomicETHFields {
	return AtomicETHFields{VA: a.VA(), RKey: a.RKey(), SwapAdd: a.SwapAdd(), Compare: a.Compare()}
}

// Encode writes f into a.
func (a AtomicETH) Encode(f *AtomicETHFields) {
	binary.BigEndian.PutUint64(a, f.VA)
	binary.BigEndian.PutUint32(a[8:], f.RKey)
	binary.BigEndian.PutUint64(a[12:], f.SwapAdd)
	binary.BigEndian.PutUint64(a[20:], f.Compare)
}

// AETH is the ACK Extended Transport Header: syndrome and MSN.
type AETH []byte

// AETHFields holds an AETH. MSN is 24 bits.
type AETHFields struct {
	Syndrome Syndrome
	MSN      uint32
}

// Syndrome returns the ACK/NAK syndrome.
func (a AETH) Syndrome() Syndrome { return Syndrome(a[0]) }

// MSN returns the 24-bit message sequence number.
func (a AETH) MSN() uint32 { return uint24(a[1:]) }

// SetSyndrome sets the syndrome.
func (a AETH) SetSyndrome(s Syndrome) { a[0] = byte(s) }

// SetMSN sets the message sequence number (24 bits).
func (a AETH) SetMSN(m uint32) { putUint24(a[1:], m) }

// Fields decodes a.
func (a AETH) Fields() AETHFields { return AETHFields{Syndrome: a.Syndrome(), MSN: a.MSN()} }

// Encode writes f into a.
func (a AETH) Encode(f *AETHFields) {
	a[0] = byte(f.Syndrome)
	putUint24(a[1:], f.MSN)
}

// AtomicAckETH carries the original remote value of an atomic operation.
type AtomicAckETH []byte

// AtomicAckETHFields holds an AtomicAckETH.
type AtomicAckETHFields struct {
	OrigData uint64
}

// OrigData returns the remote value before the atomic operation.
func (a AtomicAckETH) OrigData() uint64 { return binary.BigEndian.Uint64(a) }

// Fields decodes a.
func (a AtomicAckETH) Fields() AtomicAckETHFields { return AtomicAckETHFields{OrigData: a.OrigData()} }

// Encode writes f into a.
func (a AtomicAckETH) Encode(f *AtomicAckETHFields) {
	binary.BigEndian.PutUint64(a, f.OrigData)
}

// ImmDt is the 32-bit immediate data, opaque to the transport. It is kept in
// wire (big-endian) order as a number, as verbs reports it after ntohl.
type ImmDt []byte

// Value returns the immediate data.
func (i ImmDt) Value() uint32 { return binary.BigEndian.Uint32(i) }

// SetValue sets the immediate data.
func (i ImmDt) SetValue(v uint32) { binary.BigEndian.PutUint32(i, v) }

// IETH carries the R_Key a SEND_WITH_INVALIDATE invalidates.
type IETH []byte

// RKey returns the R_Key to invalidate.
func (i IETH) RKey() uint32 { return binary.BigEndian.Uint32(i) }

// SetRKey sets the R_Key to invalidate.
func (i IETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(i, k) }

func uint24(b []byte) uint32 {
	_ = b[2]
	return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
}

func putUint24(b []byte, v uint32) {
	_ = b[2]
	b[0] = byte(v >> 16)
	b[1] = byte(v >> 8)
	b[2] = byte(v)
}

func setBit(b, mask byte, v bool) byte {
	if v {
		return b | mask
	}
	return b &^ mask
}

func boolBit(v bool, mask byte) byte {
	if v {
		return mask
	}
	return 0
}
