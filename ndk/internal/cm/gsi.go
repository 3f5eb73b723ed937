package cm

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/ndkxdp/ndkxdp/rocev2"
)

// GSIUDPSourcePort is the UDP source port Linux puts on QP1 datagrams:
// rxe's 0xC000 + hash_32(qpn, 14) for QPN 1 (torvalds/linux
// drivers/infiniband/sw/rxe/rxe_qp.c; ROCEV2.md 1.7), 55410 in every capture.
// Receivers must not check it.
const GSIUDPSourcePort = 0xC000 + (rocev2.GSIQP*0x61C88647)>>(32-14)

// GSIFrameLen is the length of a GSI frame over IPv4 and over IPv6:
// Ethernet, IP, UDP, BTH, DETH, the MAD and the ICRC.
const (
	GSIFrameLen4 = rocev2.EthernetLen + rocev2.IPv4Len + rocev2.UDPLen + rocev2.BTHLen + rocev2.DETHLen + rocev2.MADLen + rocev2.ICRCLen
	GSIFrameLen6 = GSIFrameLen4 - rocev2.IPv4Len + rocev2.IPv6Len
)

// ErrNotGSI reports a frame that is not a CM datagram for QP1.
var ErrNotGSI = errors.New("cm: not a GSI MAD")

// GSIFramer builds the RoCEv2 frames that carry MADs: UD SEND_ONLY to the
// peer's QP1 with DETH Q_Key 0x80010000 and source QP 1, AckReq set as rxe
// sets it, and the PSN and IPv4 identification taken from per-adapter
// counters that start at 0, as the GSI QP's send queue PSN does in Linux
// (ROCEV2.md 3.1; ib_mad.c sets sq_psn to IB_MAD_SEND_Q_PSN, 0). One
// GSIFramer serves one adapter; it is safe for concurrent use.
type GSIFramer struct {
	psn  atomic.Uint32
	ipID atomic.Uint32
}

// Build writes into buf the frame carrying mad along dst and returns its
// length. It does not allocate.
func (f *GSIFramer) Build(buf []byte, dst *PathInfo, mad *[rocev2.MADLen]byte) (int, error) {
	if !dst.LocalIP.IsValid() || !dst.RemoteIP.IsValid() {
		return 0, fmt.Errorf("cm: build GSI frame: path needs both IP addresses: %w", rocev2.ErrEncodeAddr)
	}
	h := rocev2.Headers{
		Eth: rocev2.EthernetFields{Dst: dst.RemoteMAC, Src: dst.LocalMAC},
		IP:  rocev2.NewIPFields(dst.LocalIP.Unmap(), dst.RemoteIP.Unmap()),
		UDP: rocev2.UDPFields{SrcPort: GSIUDPSourcePort},
		BTH: rocev2.BTHFields{
			Opcode: rocev2.UDSendOnly,
			PKey:   dst.pkey(),
			DestQP: dst.peerQP(),
			AckReq: true,
			PSN:    rocev2.PSN(f.psn.Add(1)-1) & rocev2.PSNMask,
		},
		DETH: rocev2.DETHFields{QKey: rocev2.GSIQKey, SrcQP: rocev2.GSIQP},
	}
	h.IP.ID = uint16(f.ipID.Add(1) - 1)
	n, err := h.Encode(buf, mad[:])
	if err != nil {
		return 0, fmt.Errorf("cm: build GSI frame: %w", err)
	}
	return n, nil
}

// CheckGSI reports whether a parsed packet is a CM MAD for QP1: UD
// SEND_ONLY to QP 1 with the GSI Q_Key and a 256-byte payload. It returns
// the path back to the sender, the sender's QP and the MAD (aliasing the
// frame). The sender's QP is usually 1 but replies go to whatever it is
// (IBTA 13.5.1). It does not allocate.
func CheckGSI(p *rocev2.Packet) (reply PathInfo, srcQP uint32, mad []byte, err error) {
	switch {
	case p.BTH.Opcode != rocev2.UDSendOnly:
		return reply, 0, nil, ErrNotGSI
	case p.BTH.DestQP != rocev2.GSIQP:
		return reply, 0, nil, ErrNotGSI
	case p.DETH.QKey != rocev2.GSIQKey:
		return reply, 0, nil, ErrNotGSI
	case len(p.Payload) != rocev2.MADLen:
		return reply, 0, nil, ErrNotGSI
	}
	reply = PathInfo{
		LocalIP:   p.IP.Dst,
		RemoteIP:  p.IP.Src,
		LocalMAC:  p.Eth.Dst,
		RemoteMAC: p.Eth.Src,
		PKey:      p.BTH.PKey,
		PeerQP:    p.DETH.SrcQP,
	}
	return reply, p.DETH.SrcQP, p.Payload, nil
}

// ParseGSI parses a frame and checks it with CheckGSI.
func ParseGSI(frame []byte, p *rocev2.Packet) (reply PathInfo, srcQP uint32, mad []byte, err error) {
	if err := rocev2.Parse(frame, p); err != nil {
		return reply, 0, nil, err
	}
	return CheckGSI(p)
}
