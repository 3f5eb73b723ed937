package rocev2

import (
	"encoding/binary"
	"strconv"
)

// Service ID resolution (IBTA 12.11): how a UD client learns the QPN and
// Q_Key behind a ServiceID. rdma_cm resolves its UDP port space
// (RDMA_PS_UDP) so, with the same private-data header as a REQ (cma.c
// cma_resolve_ib_udp). Layouts: torvalds/linux include/rdma/ibta_vol1_c12.h,
// tables 119 and 120.

// SIDRStatus is SIDR_REP's status (IBTA table 121; ib_cm.h enum
// ib_cm_sidr_status).
type SIDRStatus uint8

// SIDR_REP statuses.
const (
	SIDRSuccess            SIDRStatus = 0
	SIDRUnsupported        SIDRStatus = 1 // no service for the ServiceID
	SIDRReject             SIDRStatus = 2 // the consumer refused
	SIDRNoQP               SIDRStatus = 3
	SIDRRedirect           SIDRStatus = 4
	SIDRUnsupportedVersion SIDRStatus = 5
)

func (s SIDRStatus) String() string {
	switch s {
	case SIDRSuccess:
		return "success"
	case SIDRUnsupported:
		return "service ID not supported"
	case SIDRReject:
		return "rejected"
	case SIDRNoQP:
		return "no QP"
	case SIDRRedirect:
		return "redirect"
	case SIDRUnsupportedVersion:
		return "unsupported version"
	}
	return "status " + strconv.Itoa(int(s))
}

// CMSIDRReq is a service ID resolution request (IBTA table 119).
type CMSIDRReq struct {
	RequestID   uint32
	PKey        uint16
	ServiceID   uint64
	PrivateData [216]byte
}

// AttributeID implements CMMessage.
func (*CMSIDRReq) AttributeID() AttributeID { return AttrSIDRREQ }

func (m *CMSIDRReq) encode(d []byte) {
	binary.BigEndian.PutUint32(d[0:], m.RequestID)
	binary.BigEndian.PutUint16(d[4:], m.PKey)
	binary.BigEndian.PutUint64(d[8:], m.ServiceID)
	copy(d[16:232], m.PrivateData[:])
}

func (m *CMSIDRReq) decode(d []byte) {
	m.RequestID = binary.BigEndian.Uint32(d[0:])
	m.PKey = binary.BigEndian.Uint16(d[4:])
	m.ServiceID = binary.BigEndian.Uint64(d[8:])
	copy(m.PrivateData[:], d[16:232])
}

// CMSIDRRep is a service ID resolution reply (IBTA table 120).
type CMSIDRRep struct {
	RequestID uint32
	Status    SIDRStatus
	// AdditionalInfoLength says how many bytes of AdditionalInfo count.
	AdditionalInfoLength uint8
	QPN                  uint32 // 24 bits
	ServiceID            uint64
	QKey                 uint32
	AdditionalInfo       [72]byte
	PrivateData          [136]byte
}

// AttributeID implements CMMessage.
func (*CMSIDRRep) AttributeID() AttributeID { return AttrSIDRREP }

func (m *CMSIDRRep) encode(d []byte) {
	binary.BigEndian.PutUint32(d[0:], m.RequestID)
	d[4] = byte(m.Status)
	d[5] = m.AdditionalInfoLength
	putUint24(d[8:], m.QPN)
	binary.BigEndian.PutUint64(d[12:], m.ServiceID)
	binary.BigEndian.PutUint32(d[20:], m.QKey)
	copy(d[24:96], m.AdditionalInfo[:])
	copy(d[96:232], m.PrivateData[:])
}

func (m *CMSIDRRep) decode(d []byte) {
	m.RequestID = binary.BigEndian.Uint32(d[0:])
	m.Status = SIDRStatus(d[4])
	m.AdditionalInfoLength = d[5]
	m.QPN = uint24(d[8:])
	m.ServiceID = binary.BigEndian.Uint64(d[12:])
	m.QKey = binary.BigEndian.Uint32(d[20:])
	copy(m.AdditionalInfo[:], d[24:96])
	copy(m.PrivateData[:], d[96:232])
}
