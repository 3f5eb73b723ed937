package rocev2

// ECN is the two-bit Explicit Congestion Notification field at the bottom
// of the IPv4 TOS byte and the IPv6 traffic class (RFC 3168 5). RoCEv2
// senders mark their frames ECN-capable, switches set CE instead of
// dropping, and the receiver answers CE with a CNP (ROCEV2.md 1.7).
type ECN uint8

// ECN codepoints.
const (
	NotECT ECN = 0 // not ECN-capable: a congested switch drops the frame
	ECT1   ECN = 1
	ECT0   ECN = 2 // what hardware RoCE NICs send (Huawei TOS 0x02, CX4-Lx CNP 0xc2)
	CE     ECN = 3 // congestion experienced, set by a switch
)

func (e ECN) String() string {
	switch e {
	case NotECT:
		return "Not-ECT"
	case ECT1:
		return "ECT(1)"
	case ECT0:
		return "ECT(0)"
	case CE:
		return "CE"
	}
	return "ECN(?)"
}

// TOS returns the IPv4 TOS or IPv6 traffic class byte for a DSCP (0-63,
// higher bits dropped) and an ECN codepoint.
func TOS(dscp uint8, ecn ECN) uint8 { return dscp<<2 | uint8(ecn&3) }

// DSCPOf returns the DSCP of a TOS or traffic class byte.
func DSCPOf(tos uint8) uint8 { return tos >> 2 }

// ECNOf returns the ECN codepoint of a TOS or traffic class byte.
func ECNOf(tos uint8) ECN { return ECN(tos & 3) }

// CNPLen is the payload of a CNP: 16 reserved zero bytes (Annex A17.9.2).
const CNPLen = 16
