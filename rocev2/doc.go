// Package rocev2 is the RoCEv2 wire codec: the bytes a RoCE peer sends and
// accepts, and nothing else.
//
// It holds:
//   - the InfiniBand transport headers (BTH, DETH, FETH, RETH, AtomicETH, AETH,
//     AtomicAckETH, ImmDt, IETH) as views over bytes with paired accessors
//     and Fields structs, in the manner of gVisor's pkg/tcpip/header
//     (headers.go);
//   - the opcode table (every RC, UC and UD opcode and the CNP), which drives
//     both Parse and Encode (opcode.go);
//   - the encapsulation, each header a view with named offsets, getters,
//     Fields and an Encode that writes it whole: Ethernet with an optional
//     802.1Q tag (ethernet.go), IPv4 or IPv6 (ip.go), UDP to port 4791 and
//     the per-QP UDP source port of rdma_get_udp_sport (udp.go); the header
//     sizes, pad count and path MTU enumeration (encap.go);
//   - Parse, one layer after the other: parseEthernet, parseIPv4 or
//     parseIPv6, parseUDP, the ICRC, parseTransport (packet.go); Encode and
//     EncodeHeaders (build.go); ParseError and its Reasons (errors.go);
//   - the ICRC, computed when encoding and verified when parsing (icrc.go);
//   - AETH syndromes (credit codes, RNR timers, NAK codes; aeth.go) and
//     24-bit PSN arithmetic (psn.go);
//   - the management datagrams of connection setup: the MAD header and
//     ServiceIDs (mad.go), CM REQ, REP, RTU, REJ, DREQ, DREP and MRA (cm.go),
//     rdma_cm's private-data header (cma.go).
//
// It is not a transport: it keeps no QP state, checks no PSN window, does no
// I/O and knows nothing of AF_XDP. The engine in ndk/internal uses it.
// ../shared/ROCEV2.md is the reference for every layout; comments cite it
// and the Linux sources it draws on.
//
// Parse and the encoders allocate nothing, so they can run per packet:
//
//	var p rocev2.Packet
//	if err := rocev2.Parse(frame, &p); err != nil {
//		counters[rocev2.ReasonOf(err)]++ // ReasonICRC, ReasonTruncated, ...
//		return
//	}
//	// p.BTH.Opcode, p.BTH.PSN, p.RETH.VA, p.Payload (aliases frame) ...
//
//	h := rocev2.Headers{
//		Eth: rocev2.EthernetFields{Dst: peerMAC, Src: ourMAC},
//		IP:  rocev2.NewIPFields(ourIP, peerIP),
//		UDP: rocev2.UDPFields{SrcPort: rocev2.UDPSourcePort(0, lqpn, rqpn)},
//		BTH: rocev2.BTHFields{Opcode: rocev2.RCWriteOnly, PKey: rocev2.DefaultPKey, DestQP: rqpn, AckReq: true, PSN: psn},
//		RETH: rocev2.RETHFields{VA: va, RKey: rkey, DMALen: uint32(len(data))},
//	}
//	n, err := h.Encode(txFrame, data) // headers, payload, pad, ICRC
//
// To send a payload that stays in its own buffer, write the headers with
// EncodeHeaders, compute ICRC(headers[L3Offset():], payload, PadCount(len(payload)))
// and append the pad and PutICRC behind the payload.
package rocev2
