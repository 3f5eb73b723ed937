package rocev2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// General Services Interface constants: CM MADs travel as UD SEND_ONLY to
// QP1 with this Q_Key (IBTA 13.5.1; ROCEV2.md 3.1).
const (
	GSIQP   = 1
	GSIQKey = 0x80010000
)

// MAD layout (IBTA 13.4.2; torvalds/linux include/rdma/ib_mad.h).
const (
	MADLen       = 256
	MADHeaderLen = 24
	// CMDataLen is the CM message body that follows the MAD header.
	CMDataLen = MADLen - MADHeaderLen

	MADBaseVersion = 1
	MgmtClassCM    = 0x07
	CMClassVersion = 2
	MethodSend     = 0x03
)

// AttributeID selects the CM message in a MAD (IBTA 12.6.1).
type AttributeID uint16

// CM attribute IDs.
const (
	AttrREQ     AttributeID = 0x0010
	AttrMRA     AttributeID = 0x0011
	AttrREJ     AttributeID = 0x0012
	AttrREP     AttributeID = 0x0013
	AttrRTU     AttributeID = 0x0014
	AttrDREQ    AttributeID = 0x0015
	AttrDREP    AttributeID = 0x0016
	AttrSIDRREQ AttributeID = 0x0017
	AttrSIDRREP AttributeID = 0x0018
	AttrLAP     AttributeID = 0x0019
	AttrAPR     AttributeID = 0x001A
)

func (a AttributeID) String() string {
	switch a {
	case AttrREQ:
		return "REQ"
	case AttrMRA:
		return "MRA"
	case AttrREJ:
		return "REJ"
	case AttrREP:
		return "REP"
	case AttrRTU:
		return "RTU"
	case AttrDREQ:
		return "DREQ"
	case AttrDREP:
		return "DREP"
	case AttrSIDRREQ:
		return "SIDR_REQ"
	case AttrSIDRREP:
		return "SIDR_REP"
	case AttrLAP:
		return "LAP"
	case AttrAPR:
		return "APR"
	}
	return fmt.Sprintf("attribute(%#04x)", uint16(a))
}

// MADHeader is the 24-byte common MAD header.
type MADHeader struct {
	BaseVersion       uint8
	MgmtClass         uint8
	ClassVersion      uint8
	Method            uint8
	Status            uint16
	ClassSpecific     uint16
	TransactionID     uint64
	AttributeID       AttributeID
	Reserved          uint16
	AttributeModifier uint32
}

// Encode writes h into b[:MADHeaderLen].
func (h *MADHeader) Encode(b []byte) error {
	if len(b) < MADHeaderLen {
		return fmt.Errorf("encode MAD header: %d-byte buffer, need %d", len(b), MADHeaderLen)
	}
	b[0], b[1], b[2], b[3] = h.BaseVersion, h.MgmtClass, h.ClassVersion, h.Method
	binary.BigEndian.PutUint16(b[4:], h.Status)
	binary.BigEndian.PutUint16(b[6:], h.ClassSpecific)
	binary.BigEndian.PutUint64(b[8:], h.TransactionID)
	binary.BigEndian.PutUint16(b[16:], uint16(h.AttributeID))
	binary.BigEndian.PutUint16(b[18:], h.Reserved)
	binary.BigEndian.PutUint32(b[20:], h.AttributeModifier)
	return nil
}

// DecodeMADHeader reads the common MAD header from b.
func DecodeMADHeader(b []byte) (MADHeader, error) {
	if len(b) < MADHeaderLen {
		return MADHeader{}, fmt.Errorf("decode MAD header: %d bytes, need %d: %w", len(b), MADHeaderLen, ErrMADTruncated)
	}
	return MADHeader{
		BaseVersion:       b[0],
		MgmtClass:         b[1],
		ClassVersion:      b[2],
		Method:            b[3],
		Status:            binary.BigEndian.Uint16(b[4:]),
		ClassSpecific:     binary.BigEndian.Uint16(b[6:]),
		TransactionID:     binary.BigEndian.Uint64(b[8:]),
		AttributeID:       AttributeID(binary.BigEndian.Uint16(b[16:])),
		Reserved:          binary.BigEndian.Uint16(b[18:]),
		AttributeModifier: binary.BigEndian.Uint32(b[20:]),
	}, nil
}

// MAD errors, matched with errors.Is.
var (
	ErrMADTruncated = errors.New("rocev2: MAD is not 256 bytes long")
	ErrMADVersion   = errors.New("rocev2: unsupported MAD base or class version")
	ErrMADClass     = errors.New("rocev2: MAD is not of the CM class")
	ErrMADAttribute = errors.New("rocev2: CM attribute not supported")
	ErrCMAHeader    = errors.New("rocev2: malformed rdma_cm private-data header")
	ErrServiceID    = errors.New("rocev2: ServiceID is not an rdma_cm IP ServiceID")
	ErrMADNoMessage = errors.New("rocev2: MAD has no CM message")
)

// MAD is a CM management datagram: the header and the decoded message.
type MAD struct {
	Header  MADHeader
	Message CMMessage
}

// NewCMMAD returns the MAD Linux's CM sends for msg: base version 1, CM
// class version 2, method Send, the given transaction ID (cm.c cm_format_mad_hdr).
func NewCMMAD(tid uint64, msg CMMessage) MAD {
	return MAD{
		Header: MADHeader{
			BaseVersion:   MADBaseVersion,
			MgmtClass:     MgmtClassCM,
			ClassVersion:  CMClassVersion,
			Method:        MethodSend,
			TransactionID: tid,
			AttributeID:   msg.AttributeID(),
		},
		Message: msg,
	}
}

// Encode writes the MAD into b[:MADLen]. The header's AttributeID is taken
// from the message.
func (m *MAD) Encode(b []byte) error {
	if len(b) < MADLen {
		return fmt.Errorf("encode MAD: %d-byte buffer, need %d", len(b), MADLen)
	}
	if m.Message == nil {
		return fmt.Errorf("encode MAD: %w", ErrMADNoMessage)
	}
	h := m.Header
	h.AttributeID = m.Message.AttributeID()
	if err := h.Encode(b); err != nil {
		return err
	}
	body := b[MADHeaderLen:MADLen]
	clear(body)
	m.Message.encode(body)
	return nil
}

// DecodeMAD decodes a 256-byte CM MAD. It checks the base version, class and
// class version, and decodes REQ, REP, RTU, REJ, DREQ, DREP, MRA, SIDR_REQ
// and SIDR_REP.
func DecodeMAD(b []byte) (MAD, error) {
	if len(b) != MADLen {
		return MAD{}, fmt.Errorf("decode MAD: %d bytes: %w", len(b), ErrMADTruncated)
	}
	h, _ := DecodeMADHeader(b)
	if h.BaseVersion != MADBaseVersion {
		return MAD{}, fmt.Errorf("decode MAD: base version %d: %w", h.BaseVersion, ErrMADVersion)
	}
	if h.MgmtClass != MgmtClassCM {
		return MAD{}, fmt.Errorf("decode MAD: class %#02x: %w", h.MgmtClass, ErrMADClass)
	}
	if h.ClassVersion != CMClassVersion {
		return MAD{}, fmt.Errorf("decode MAD: CM class version %d: %w", h.ClassVersion, ErrMADVersion)
	}
	var msg CMMessage
	switch h.AttributeID {
	case AttrREQ:
		msg = new(CMReq)
	case AttrREP:
		msg = new(CMRep)
	case AttrRTU:
		msg = new(CMRtu)
	case AttrREJ:
		msg = new(CMRej)
	case AttrDREQ:
		msg = new(CMDreq)
	case AttrDREP:
		msg = new(CMDrep)
	case AttrMRA:
		msg = new(CMMra)
	case AttrSIDRREQ:
		msg = new(CMSIDRReq)
	case AttrSIDRREP:
		msg = new(CMSIDRRep)
	default:
		return MAD{}, fmt.Errorf("decode MAD: %v: %w", h.AttributeID, ErrMADAttribute)
	}
	msg.decode(b[MADHeaderLen:])
	return MAD{Header: h, Message: msg}, nil
}

// GID is a 128-bit InfiniBand global identifier. RoCE uses IP addresses as
// GIDs, IPv4 ones mapped into ::ffff:0:0/96.
type GID [16]byte

// GIDFromAddr returns the GID of an IP address: IPv4 addresses become
// IPv4-mapped IPv6 addresses, as rdma_ip2gid does.
func GIDFromAddr(a netip.Addr) GID { return GID(a.As16()) }

// Addr returns the IP address of g, unmapping IPv4-mapped GIDs.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

func (g GID) String() string { return netip.AddrFrom16(g).String() }

// EUI64 returns the modified EUI-64 that Linux RoCE drivers derive from a MAC
// address for the node and port GUID (addrconf_addr_eui48: insert ff:fe and
// flip the universal/local bit).
func EUI64(m MAC) uint64 {
	return uint64(m[0]^2)<<56 | uint64(m[1])<<48 | uint64(m[2])<<40 | 0xFF<<32 |
		0xFE<<24 | uint64(m[3])<<16 | uint64(m[4])<<8 | uint64(m[5])
}

// PortSpace is the rdma_cm port space in an IP ServiceID
// (torvalds/linux include/rdma/rdma_cm.h enum rdma_ucm_port_space).
type PortSpace uint16

// Port spaces.
const (
	PortSpaceIPoIB PortSpace = 0x0002
	PortSpaceTCP   PortSpace = 0x0106
	PortSpaceUDP   PortSpace = 0x0111
	PortSpaceIB    PortSpace = 0x013F
)

// ServiceID returns the IB CM ServiceID rdma_cm uses for a port in a port
// space: 0x0000000001060000 | port for RDMA_PS_TCP (cma.c cma_get_service_id).
func ServiceID(ps PortSpace, port uint16) uint64 { return uint64(ps)<<16 | uint64(port) }

// ParseServiceID splits an rdma_cm ServiceID into its port space and port.
// It fails unless the top 32 bits are zero and the port space is known.
func ParseServiceID(sid uint64) (PortSpace, uint16, error) {
	ps := PortSpace(sid >> 16)
	switch {
	case sid>>32 != 0:
	case ps == PortSpaceTCP, ps == PortSpaceUDP, ps == PortSpaceIB, ps == PortSpaceIPoIB:
		return ps, uint16(sid), nil
	}
	return 0, 0, fmt.Errorf("parse ServiceID %#016x: %w", sid, ErrServiceID)
}
