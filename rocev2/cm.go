package rocev2

import (
	"encoding/binary"
	"strconv"
)

// CMMessage is a CM message body: the 232 bytes after the MAD header. Field
// positions follow IBTA chapter 12 tables 106-113 as torvalds/linux
// include/rdma/ibta_vol1_c12.h encodes them, bits numbered MSB = 7.
type CMMessage interface {
	AttributeID() AttributeID
	// encode writes the message into a zeroed 232-byte body.
	encode(d []byte)
	// decode reads the message from a 232-byte body.
	decode(d []byte)
}

// CM transport service types in REQ (IBTA table 106).
const (
	CMTransportRC = 0
	CMTransportUC = 1
	CMTransportRD = 2
)

// CMPath is a path description in a REQ: 44 bytes at offset 52 (primary) or
// 96 (alternate). LIDs are 0xFFFF (permissive) on RoCE, GIDs are IP
// addresses, and HopLimit > 1 marks the path as routed.
type CMPath struct {
	LocalLID, RemoteLID uint16
	LocalGID, RemoteGID GID
	FlowLabel           uint32 // 20 bits
	PacketRate          uint8  // 6 bits
	TrafficClass        uint8
	HopLimit            uint8
	SL                  uint8 // 4 bits
	SubnetLocal         bool
	LocalAckTimeout     uint8 // 5 bits: 4.096 us * 2^t
}

func (p *CMPath) encode(d []byte) {
	binary.BigEndian.PutUint16(d[0:], p.LocalLID)
	binary.BigEndian.PutUint16(d[2:], p.RemoteLID)
	copy(d[4:20], p.LocalGID[:])
	copy(d[20:36], p.RemoteGID[:])
	binary.BigEndian.PutUint32(d[36:], (p.FlowLabel&0xFFFFF)<<12)
	d[39] |= p.PacketRate & 0x3F
	d[40] = p.TrafficClass
	d[41] = p.HopLimit
	d[42] = (p.SL&0xF)<<4 | boolBit(p.SubnetLocal, 0x08)
	d[43] |= (p.LocalAckTimeout & 0x1F) << 3
}

func (p *CMPath) decode(d []byte) {
	*p = CMPath{
		LocalLID:        binary.BigEndian.Uint16(d[0:]),
		RemoteLID:       binary.BigEndian.Uint16(d[2:]),
		LocalGID:        GID(d[4:20]),
		RemoteGID:       GID(d[20:36]),
		FlowLabel:       binary.BigEndian.Uint32(d[36:]) >> 12,
		PacketRate:      d[39] & 0x3F,
		TrafficClass:    d[40],
		HopLimit:        d[41],
		SL:              d[42] >> 4,
		SubnetLocal:     d[42]&0x08 != 0,
		LocalAckTimeout: d[43] >> 3,
	}
}

// CMReq is a connection request (IBTA table 106).
type CMReq struct {
	LocalCommID uint32
	// VendorID is the 24-bit ECE vendor ID (Linux cm.c CM_REQ_VENDOR_ID).
	VendorID                uint32
	ServiceID               uint64
	LocalCAGUID             uint64
	LocalQKey               uint32
	LocalQPN                uint32 // 24 bits
	ResponderResources      uint8
	LocalEECN               uint32 // 24 bits
	InitiatorDepth          uint8
	RemoteEECN              uint32 // 24 bits
	RemoteCMResponseTimeout uint8  // 5 bits: 4.096 us * 2^t
	TransportType           uint8  // 2 bits: CMTransportRC, ...
	EndToEndFlowControl     bool
	StartingPSN             PSN
	LocalCMResponseTimeout  uint8 // 5 bits
	RetryCount              uint8 // 3 bits
	PKey                    uint16
	PathMTU                 MTU // 4 bits
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits; 7 means infinite
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtendedTransportType   uint8 // 3 bits
	Primary                 CMPath
	Alternate               CMPath
	SAPSupported            bool
	// PrivateData holds the rdma_cm header (DecodeCMAHeader) and user data.
	PrivateData [92]byte
}

// AttributeID implements CMMessage.
func (*CMReq) AttributeID() AttributeID { return AttrREQ }

func (m *CMReq) encode(d []byte) {
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	putUint24(d[5:], m.VendorID)
	binary.BigEndian.PutUint64(d[8:], m.ServiceID)
	binary.BigEndian.PutUint64(d[16:], m.LocalCAGUID)
	binary.BigEndian.PutUint32(d[28:], m.LocalQKey)
	putUint24(d[32:], m.LocalQPN)
	d[35] = m.ResponderResources
	putUint24(d[36:], m.LocalEECN)
	d[39] = m.InitiatorDepth
	putUint24(d[40:], m.RemoteEECN)
	d[43] = (m.RemoteCMResponseTimeout&0x1F)<<3 | (m.TransportType&3)<<1 | boolBit(m.EndToEndFlowControl, 1)
	putUint24(d[44:], uint32(m.StartingPSN))
	d[47] = (m.LocalCMResponseTimeout&0x1F)<<3 | m.RetryCount&7
	binary.BigEndian.PutUint16(d[48:], m.PKey)
	d[50] = uint8(m.PathMTU&0xF)<<4 | boolBit(m.RDCExists, 0x08) | m.RNRRetryCount&7
	d[51] = (m.MaxCMRetries&0xF)<<4 | boolBit(m.SRQ, 0x08) | m.ExtendedTransportType&7
	m.Primary.encode(d[52:96])
	m.Alternate.encode(d[96:140])
	d[139] |= boolBit(m.SAPSupported, 0x04)
	copy(d[140:232], m.PrivateData[:])
}

func (m *CMReq) decode(d []byte) {
	*m = CMReq{
		LocalCommID:             binary.BigEndian.Uint32(d[0:]),
		VendorID:                uint24(d[5:]),
		ServiceID:               binary.BigEndian.Uint64(d[8:]),
		LocalCAGUID:             binary.BigEndian.Uint64(d[16:]),
		LocalQKey:               binary.BigEndian.Uint32(d[28:]),
		LocalQPN:                uint24(d[32:]),
		ResponderResources:      d[35],
		LocalEECN:               uint24(d[36:]),
		InitiatorDepth:          d[39],
		RemoteEECN:              uint24(d[40:]),
		RemoteCMResponseTimeout: d[43] >> 3,
		TransportType:           d[43] >> 1 & 3,
		EndToEndFlowControl:     d[43]&1 != 0,
		StartingPSN:             PSN(uint24(d[44:])),
		LocalCMResponseTimeout:  d[47] >> 3,
		RetryCount:              d[47] & 7,
		PKey:                    binary.BigEndian.Uint16(d[48:]),
		PathMTU:                 MTU(d[50] >> 4),
		RDCExists:               d[50]&0x08 != 0,
		RNRRetryCount:           d[50] & 7,
		MaxCMRetries:            d[51] >> 4,
		SRQ:                     d[51]&0x08 != 0,
		ExtendedTransportType:   d[51] & 7,
		SAPSupported:            d[139]&0x04 != 0,
	}
	m.Primary.decode(d[52:96])
	m.Alternate.decode(d[96:140])
	copy(m.PrivateData[:], d[140:232])
}

// CMRep is a connection reply (IBTA table 110).
type CMRep struct {
	LocalCommID  uint32
	RemoteCommID uint32
	LocalQKey    uint32
	LocalQPN     uint32 // 24 bits
	// VendorID is the 24-bit ECE vendor ID, spread over three reserved
	// bytes (Linux cm.c CM_REP_VENDOR_ID_H/M/L at 15, 19, 23).
	VendorID            uint32
	LocalEECN           uint32 // 24 bits
	StartingPSN         PSN
	ResponderResources  uint8
	InitiatorDepth      uint8
	TargetAckDelay      uint8 // 5 bits
	FailoverAccepted    uint8 // 2 bits
	EndToEndFlowControl bool
	RNRRetryCount       uint8 // 3 bits
	SRQ                 bool
	LocalCAGUID         uint64
	PrivateData         [196]byte
}

// AttributeID implements CMMessage.
func (*CMRep) AttributeID() AttributeID { return AttrREP }

func (m *CMRep) encode(d []byte) {
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(d[4:], m.RemoteCommID)
	binary.BigEndian.PutUint32(d[8:], m.LocalQKey)
	putUint24(d[12:], m.LocalQPN)
	d[15] = byte(m.VendorID >> 16)
	putUint24(d[16:], m.LocalEECN)
	d[19] = byte(m.VendorID >> 8)
	putUint24(d[20:], uint32(m.StartingPSN))
	d[23] = byte(m.VendorID)
	d[24] = m.ResponderResources
	d[25] = m.InitiatorDepth
	d[26] = (m.TargetAckDelay&0x1F)<<3 | (m.FailoverAccepted&3)<<1 | boolBit(m.EndToEndFlowControl, 1)
	d[27] = (m.RNRRetryCount&7)<<5 | boolBit(m.SRQ, 0x10)
	binary.BigEndian.PutUint64(d[28:], m.LocalCAGUID)
	copy(d[36:232], m.PrivateData[:])
}

func (m *CMRep) decode(d []byte) {
	*m = CMRep{
		LocalCommID:         binary.BigEndian.Uint32(d[0:]),
		RemoteCommID:        binary.BigEndian.Uint32(d[4:]),
		LocalQKey:           binary.BigEndian.Uint32(d[8:]),
		LocalQPN:            uint24(d[12:]),
		VendorID:            uint32(d[15])<<16 | uint32(d[19])<<8 | uint32(d[23]),
		LocalEECN:           uint24(d[16:]),
		StartingPSN:         PSN(uint24(d[20:])),
		ResponderResources:  d[24],
		InitiatorDepth:      d[25],
		TargetAckDelay:      d[26] >> 3,
		FailoverAccepted:    d[26] >> 1 & 3,
		EndToEndFlowControl: d[26]&1 != 0,
		RNRRetryCount:       d[27] >> 5,
		SRQ:                 d[27]&0x10 != 0,
		LocalCAGUID:         binary.BigEndian.Uint64(d[28:]),
	}
	copy(m.PrivateData[:], d[36:232])
}

// CMRtu is Ready To Use (IBTA table 111).
type CMRtu struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [224]byte
}

// AttributeID implements CMMessage.
func (*CMRtu) AttributeID() AttributeID { return AttrRTU }

func (m *CMRtu) encode(d []byte) {
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(d[4:], m.RemoteCommID)
	copy(d[8:232], m.PrivateData[:])
}

func (m *CMRtu) decode(d []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(d[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(d[4:])
	copy(m.PrivateData[:], d[8:232])
}

// CMDreq is a disconnection request (IBTA table 112).
type CMDreq struct {
	LocalCommID  uint32
	RemoteCommID uint32
	RemoteQPN    uint32 // 24 bits: the QP (or EEC) being disconnected
	PrivateData  [220]byte
}

// AttributeID implements CMMessage.
func (*CMDreq) AttributeID() AttributeID { return AttrDREQ }

func (m *CMDreq) encode(d []byte) {
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(d[4:], m.RemoteCommID)
	putUint24(d[8:], m.RemoteQPN)
	copy(d[12:232], m.PrivateData[:])
}

func (m *CMDreq) decode(d []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(d[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(d[4:])
	m.RemoteQPN = uint24(d[8:])
	copy(m.PrivateData[:], d[12:232])
}

// CMDrep is a disconnection reply (IBTA table 113).
type CMDrep struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [224]byte
}

// AttributeID implements CMMessage.
func (*CMDrep) AttributeID() AttributeID { return AttrDREP }

func (m *CMDrep) encode(d []byte) {
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(d[4:], m.RemoteCommID)
	copy(d[8:232], m.PrivateData[:])
}

func (m *CMDrep) decode(d []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(d[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(d[4:])
	copy(m.PrivateData[:], d[8:232])
}

// CMMessageKind is the 2-bit "message rejected" field of REJ and "message
// MRAed" field of MRA.
type CMMessageKind uint8

// Message kinds.
const (
	CMKindREQ   CMMessageKind = 0
	CMKindREP   CMMessageKind = 1
	CMKindOther CMMessageKind = 2 // REJ: no message; MRA: LAP
)

// RejectReason is the REJ reason code (IBTA table 108; torvalds/linux
// include/rdma/ib_cm.h enum ib_cm_rej_reason).
type RejectReason uint16

// Reject reasons.
const (
	RejNoQP                      RejectReason = 1
	RejNoEEC                     RejectReason = 2
	RejNoResources               RejectReason = 3
	RejTimeout                   RejectReason = 4
	RejUnsupported               RejectReason = 5
	RejInvalidCommID             RejectReason = 6
	RejInvalidCommInstance       RejectReason = 7
	RejInvalidServiceID          RejectReason = 8
	RejInvalidTransportType      RejectReason = 9
	RejStaleConn                 RejectReason = 10
	RejRDCNotExist               RejectReason = 11
	RejInvalidGID                RejectReason = 12
	RejInvalidLID                RejectReason = 13
	RejInvalidSL                 RejectReason = 14
	RejInvalidTrafficClass       RejectReason = 15
	RejInvalidHopLimit           RejectReason = 16
	RejInvalidPacketRate         RejectReason = 17
	RejInvalidAltGID             RejectReason = 18
	RejInvalidAltLID             RejectReason = 19
	RejInvalidAltSL              RejectReason = 20
	RejInvalidAltTrafficClass    RejectReason = 21
	RejInvalidAltHopLimit        RejectReason = 22
	RejInvalidAltPacketRate      RejectReason = 23
	RejPortCMRedirect            RejectReason = 24
	RejPortRedirect              RejectReason = 25
	RejInvalidMTU                RejectReason = 26
	RejInsufficientRespResources RejectReason = 27
	RejConsumerDefined           RejectReason = 28
	RejInvalidRNRRetry           RejectReason = 29
	RejDuplicateLocalCommID      RejectReason = 30
	RejInvalidClassVersion       RejectReason = 31
	RejInvalidFlowLabel          RejectReason = 32
	RejInvalidAltFlowLabel       RejectReason = 33
	RejVendorOptionNotSupported  RejectReason = 35
)

var rejectReasonNames = map[RejectReason]string{
	RejNoQP: "no QP", RejNoEEC: "no EEC", RejNoResources: "no resources", RejTimeout: "timeout",
	RejUnsupported: "unsupported request", RejInvalidCommID: "invalid comm ID",
	RejInvalidCommInstance: "invalid comm instance", RejInvalidServiceID: "invalid service ID",
	RejInvalidTransportType: "invalid transport type", RejStaleConn: "stale conn",
	RejRDCNotExist: "RDC not exist", RejInvalidGID: "invalid GID", RejInvalidLID: "invalid LID",
	RejInvalidSL: "invalid SL", RejInvalidTrafficClass: "invalid traffic class",
	RejInvalidHopLimit: "invalid hop limit", RejInvalidPacketRate: "invalid packet rate",
	RejInvalidAltGID: "invalid alt GID", RejInvalidAltLID: "invalid alt LID",
	RejInvalidAltSL: "invalid alt SL", RejInvalidAltTrafficClass: "invalid alt traffic class",
	RejInvalidAltHopLimit: "invalid alt hop limit", RejInvalidAltPacketRate: "invalid alt packet rate",
	RejPortCMRedirect: "port CM redirect", RejPortRedirect: "port redirect", RejInvalidMTU: "invalid MTU",
	RejInsufficientRespResources: "insufficient resp resources", RejConsumerDefined: "consumer defined",
	RejInvalidRNRRetry: "invalid RNR retry", RejDuplicateLocalCommID: "duplicate local comm ID",
	RejInvalidClassVersion: "invalid class version", RejInvalidFlowLabel: "invalid flow label",
	RejInvalidAltFlowLabel: "invalid alt flow label", RejVendorOptionNotSupported: "vendor option is not supported",
}

// String returns the name Linux's ibcm_reject_msg gives the reason.
func (r RejectReason) String() string {
	if s, ok := rejectReasonNames[r]; ok {
		return s
	}
	return "unrecognized reason " + strconv.Itoa(int(r))
}

// CMRej is a connection reject (IBTA table 108).
type CMRej struct {
	LocalCommID        uint32
	RemoteCommID       uint32
	MessageRejected    CMMessageKind
	RejectedInfoLength uint8 // 7 bits: valid bytes of ARI
	Reason             RejectReason
	ARI                [72]byte // additional reject information
	PrivateData        [148]byte
}

// AttributeID implements CMMessage.
func (*CMRej) AttributeID() AttributeID { return AttrREJ }

func (m *CMRej) encode(d []byte) {
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(d[4:], m.RemoteCommID)
	d[8] = uint8(m.MessageRejected&3) << 6
	d[9] = (m.RejectedInfoLength & 0x7F) << 1
	binary.BigEndian.PutUint16(d[10:], uint16(m.Reason))
	copy(d[12:84], m.ARI[:])
	copy(d[84:232], m.PrivateData[:])
}

func (m *CMRej) decode(d []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(d[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(d[4:])
	m.MessageRejected = CMMessageKind(d[8] >> 6)
	m.RejectedInfoLength = d[9] >> 1
	m.Reason = RejectReason(binary.BigEndian.Uint16(d[10:]))
	copy(m.ARI[:], d[12:84])
	copy(m.PrivateData[:], d[84:232])
}

// CMMra is Message Receipt Acknowledgement: the sender needs more time
// (IBTA table 107).
type CMMra struct {
	LocalCommID    uint32
	RemoteCommID   uint32
	MessageMRAed   CMMessageKind
	ServiceTimeout uint8 // 5 bits: 4.096 us * 2^t
	PrivateData    [222]byte
}

// AttributeID implements CMMessage.
func (*CMMra) AttributeID() AttributeID { return AttrMRA }

func (m *CMMra) encode(d []byte) {
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(d[4:], m.RemoteCommID)
	d[8] = uint8(m.MessageMRAed&3) << 6
	d[9] = (m.ServiceTimeout & 0x1F) << 3
	copy(d[10:232], m.PrivateData[:])
}

func (m *CMMra) decode(d []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(d[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(d[4:])
	m.MessageMRAed = CMMessageKind(d[8] >> 6)
	m.ServiceTimeout = d[9] >> 3
	copy(m.PrivateData[:], d[10:232])
}
