package rocev2

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// CMAHeaderLen is the size of the rdma_cm header at the start of a REQ's
// private data, leaving 56 bytes of user data.
const CMAHeaderLen = 36

// CMAHeader is rdma_cm's private-data header in a CM REQ (torvalds/linux
// drivers/infiniband/core/cma.c struct cma_hdr): the active side's IP
// address and port and the address it connects to. The destination port is
// not here: it is in the ServiceID. The passive side checks these addresses
// against the IP header that carried the REQ (ROCEV2.md 3.4, 3.5).
type CMAHeader struct {
	SrcPort uint16
	// Src and Dst are both IPv4 or both IPv6.
	Src, Dst netip.Addr
}

// Encode writes h into b[:CMAHeaderLen]: cma_version 0, the IP version in the
// high nibble, the source port, then each address in 16 bytes (IPv4 in the
// last four, after 12 zero bytes).
func (h *CMAHeader) Encode(b []byte) error {
	if len(b) < CMAHeaderLen {
		return fmt.Errorf("encode rdma_cm header: %d-byte buffer, need %d", len(b), CMAHeaderLen)
	}
	v4, ok := sameFamily(h.Src, h.Dst)
	if !ok {
		return fmt.Errorf("encode rdma_cm header: addresses %v and %v are not of one IP version: %w", h.Src, h.Dst, ErrCMAHeader)
	}
	clear(b[:CMAHeaderLen])
	if v4 {
		b[1] = 4 << 4
		s, d := h.Src.As4(), h.Dst.As4()
		copy(b[16:20], s[:])
		copy(b[32:36], d[:])
	} else {
		b[1] = 6 << 4
		s, d := h.Src.As16(), h.Dst.As16()
		copy(b[4:20], s[:])
		copy(b[20:36], d[:])
	}
	binary.BigEndian.PutUint16(b[2:], h.SrcPort)
	return nil
}

// DecodeCMAHeader reads the rdma_cm header from a REQ's private data. Like
// cma.c it rejects a cma_version other than 0 and IP versions other than 4
// and 6.
func DecodeCMAHeader(b []byte) (CMAHeader, error) {
	if len(b) < CMAHeaderLen {
		return CMAHeader{}, fmt.Errorf("decode rdma_cm header: %d bytes, need %d: %w", len(b), CMAHeaderLen, ErrCMAHeader)
	}
	if b[0] != 0 {
		return CMAHeader{}, fmt.Errorf("decode rdma_cm header: cma_version %d, want 0: %w", b[0], ErrCMAHeader)
	}
	h := CMAHeader{SrcPort: binary.BigEndian.Uint16(b[2:])}
	switch b[1] >> 4 {
	case 4:
		h.Src = netip.AddrFrom4([4]byte(b[16:20]))
		h.Dst = netip.AddrFrom4([4]byte(b[32:36]))
	case 6:
		h.Src = netip.AddrFrom16([16]byte(b[4:20]))
		h.Dst = netip.AddrFrom16([16]byte(b[20:36]))
	default:
		return CMAHeader{}, fmt.Errorf("decode rdma_cm header: IP version %d: %w", b[1]>>4, ErrCMAHeader)
	}
	return h, nil
}

// CMAFlowLabel returns the flow label rdma_cm puts in the REQ path for an
// IPv4 connection, or an IPv6 one without a flow label, from the active
// side's port and the service port: (sport*31 + dport) masked to 20 bits
// (cma.c cma_get_roce_udp_flow_label). Newer rxe, mlx5, hns and irdma then
// derive the UDP source port from it with UDPSourcePort.
func CMAFlowLabel(sport, dport uint16) uint32 {
	return (uint32(sport)*31 + uint32(dport)) & 0xFFFFF
}
