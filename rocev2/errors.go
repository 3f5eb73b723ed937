package rocev2

import "errors"

// Reason classifies why Parse rejected a frame. The engine counts rejects by
// Reason, so every reject path maps to exactly one value.
type Reason uint8

// Reasons a frame is rejected.
const (
	ReasonNone           Reason = iota
	ReasonTruncated             // the frame ends before a header or length it declares
	ReasonEtherType             // not IPv4 or IPv6, with or without one 802.1Q tag
	ReasonIPHeader              // malformed or unsupported IP header (version, options, fragment)
	ReasonIPChecksum            // IPv4 header checksum does not verify
	ReasonNotUDP                // IP payload is not UDP
	ReasonPort                  // UDP destination port is not 4791
	ReasonLengthMismatch        // IP and UDP lengths disagree
	ReasonBadVersion            // BTH TVer is not 0
	ReasonUnknownOpcode         // opcode not in the table (RD, reserved, vendor)
	ReasonOpcodeLength          // packet length does not match the headers and payload of its opcode
	ReasonBadPadCount           // PadCnt not allowed for the opcode, larger than the payload, or misaligned
	ReasonICRC                  // ICRC mismatch
	numReasons
)

var reasonNames = [numReasons]string{
	ReasonNone:           "none",
	ReasonTruncated:      "truncated",
	ReasonEtherType:      "unsupported ethertype",
	ReasonIPHeader:       "unsupported IP header",
	ReasonIPChecksum:     "IPv4 header checksum mismatch",
	ReasonNotUDP:         "not UDP",
	ReasonPort:           "UDP destination port is not 4791",
	ReasonLengthMismatch: "IP and UDP lengths disagree",
	ReasonBadVersion:     "BTH transport version is not 0",
	ReasonUnknownOpcode:  "unknown opcode",
	ReasonOpcodeLength:   "length does not match opcode",
	ReasonBadPadCount:    "bad pad count",
	ReasonICRC:           "ICRC mismatch",
}

func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "unknown reason"
}

// ParseError is the error Parse and ICRC return. Every ParseError value is
// allocated once at package init, so rejecting a frame allocates nothing.
// errors.Is matches on Reason, so callers compare against the Err* sentinels.
type ParseError struct {
	Reason Reason
	// Detail says which check failed, e.g. "IPv4 header has options".
	Detail string
	msg    string
}

func (e *ParseError) Error() string { return e.msg }

// Is reports whether target is a *ParseError with the same Reason.
func (e *ParseError) Is(target error) bool {
	t, ok := target.(*ParseError)
	return ok && t.Reason == e.Reason
}

func newParseError(r Reason, detail string) *ParseError {
	msg := "rocev2: " + r.String()
	if detail != "" {
		msg += ": " + detail
	}
	return &ParseError{Reason: r, Detail: detail, msg: msg}
}

// Sentinels for errors.Is, one per Reason.
var (
	ErrTruncated      = newParseError(ReasonTruncated, "")
	ErrEtherType      = newParseError(ReasonEtherType, "")
	ErrIPHeader       = newParseError(ReasonIPHeader, "")
	ErrIPChecksum     = newParseError(ReasonIPChecksum, "")
	ErrNotUDP         = newParseError(ReasonNotUDP, "")
	ErrPort           = newParseError(ReasonPort, "")
	ErrLengthMismatch = newParseError(ReasonLengthMismatch, "")
	ErrBadVersion     = newParseError(ReasonBadVersion, "")
	ErrUnknownOpcode  = newParseError(ReasonUnknownOpcode, "")
	ErrOpcodeLength   = newParseError(ReasonOpcodeLength, "")
	ErrBadPadCount    = newParseError(ReasonBadPadCount, "")
	ErrICRC           = newParseError(ReasonICRC, "")
)

// The specific errors Parse returns. Their Detail names the failed check.
var (
	errShortEthernet   = newParseError(ReasonTruncated, "frame shorter than its Ethernet header")
	errShortIPv4       = newParseError(ReasonTruncated, "frame shorter than an IPv4 header")
	errShortIPv6       = newParseError(ReasonTruncated, "frame shorter than an IPv6 header")
	errIPLenBeyond     = newParseError(ReasonTruncated, "IP length runs past the end of the frame")
	errShortUDP        = newParseError(ReasonTruncated, "IP payload shorter than UDP header, BTH and ICRC")
	errEtherType       = newParseError(ReasonEtherType, "ethertype is neither IPv4 nor IPv6")
	errIPv4Version     = newParseError(ReasonIPHeader, "IPv4 ethertype but IP version is not 4")
	errIPv6Version     = newParseError(ReasonIPHeader, "IPv6 ethertype but IP version is not 6")
	errIPv4Options     = newParseError(ReasonIPHeader, "IPv4 header has options (the ICRC is defined for 20-byte headers only)")
	errIPv4TotalLen    = newParseError(ReasonIPHeader, "IPv4 total length is smaller than its header")
	errIPv4Fragment    = newParseError(ReasonIPHeader, "IPv4 fragment (MF set or nonzero offset)")
	errIPv4Checksum    = newParseError(ReasonIPChecksum, "IPv4 header checksum does not verify")
	errNotUDP          = newParseError(ReasonNotUDP, "IP protocol / next header is not UDP")
	errPort            = newParseError(ReasonPort, "UDP destination port is not 4791")
	errUDPLength       = newParseError(ReasonLengthMismatch, "UDP length differs from the IP payload length")
	errTVer            = newParseError(ReasonBadVersion, "BTH TVer is not 0")
	errUnknownOpcode   = newParseError(ReasonUnknownOpcode, "opcode is not an RC, UC, UD or CNP opcode")
	errOpcodeShort     = newParseError(ReasonOpcodeLength, "packet shorter than the headers its opcode carries")
	errOpcodePayload   = newParseError(ReasonOpcodeLength, "payload present on an opcode that carries none")
	errOpcodeFixed     = newParseError(ReasonOpcodeLength, "payload length differs from the fixed length of the opcode")
	errPadNotAllowed   = newParseError(ReasonBadPadCount, "PadCnt is nonzero on an opcode that is never padded")
	errPadBeyond       = newParseError(ReasonBadPadCount, "PadCnt is larger than the payload")
	errPadMisaligned   = newParseError(ReasonBadPadCount, "payload plus pad is not a multiple of 4 bytes")
	errICRC            = newParseError(ReasonICRC, "ICRC does not match the packet")
	errICRCShortHeader = newParseError(ReasonTruncated, "ICRC input shorter than IP, UDP and BTH headers")
	errICRCIPVersion   = newParseError(ReasonIPHeader, "ICRC input does not start with an IPv4 or IPv6 header")
)

// ReasonOf returns the Reason carried by err, or ReasonNone when err is not a
// *ParseError. It does not allocate, so the engine can count rejects per packet.
func ReasonOf(err error) Reason {
	// Parse returns its errors unwrapped; the type assertion keeps the common
	// case free of the reflection errors.As uses.
	if pe, ok := err.(*ParseError); ok {
		return pe.Reason
	}
	var pe *ParseError
	if errors.As(err, &pe) {
		return pe.Reason
	}
	return ReasonNone
}
