package rocev2

import (
	"strconv"
	"time"
)

// Syndrome is the AETH syndrome byte: bit 7 is 0, bits 6:5 the type, bits
// 4:0 a credit code, RNR timer or NAK code (IBTA 9.7.5.1; rxe_hdr.h
// enum aeth_syndrome).
type Syndrome uint8

// AckType is bits 6:5 of a Syndrome.
type AckType uint8

// Syndrome types.
const (
	AckTypeACK      AckType = 0
	AckTypeRNRNAK   AckType = 1
	AckTypeReserved AckType = 2
	AckTypeNAK      AckType = 3
)

func (t AckType) String() string {
	switch t {
	case AckTypeACK:
		return "ACK"
	case AckTypeRNRNAK:
		return "RNR NAK"
	case AckTypeNAK:
		return "NAK"
	}
	return "reserved"
}

// Type returns the syndrome type.
func (s Syndrome) Type() AckType { return AckType(s >> 5 & 3) }

// Value returns bits 4:0: the credit code of an ACK, the timer of an RNR
// NAK or the code of a NAK.
func (s Syndrome) Value() uint8 { return uint8(s) & 0x1F }

// ACKSyndrome returns the syndrome of an ACK advertising credit code c
// (CreditInvalid when the responder does not count credits).
func ACKSyndrome(c CreditCode) Syndrome { return Syndrome(c & 0x1F) }

// RNRNAKSyndrome returns the syndrome of an RNR NAK asking the requester to
// wait t before retrying.
func RNRNAKSyndrome(t RNRTimer) Syndrome { return Syndrome(0x20 | t&0x1F) }

// NAKSyndrome returns the syndrome of a NAK with code c.
func NAKSyndrome(c NAKCode) Syndrome { return Syndrome(0x60 | c&0x1F) }

// CreditCode returns the credit code of an ACK syndrome.
func (s Syndrome) CreditCode() CreditCode { return CreditCode(s.Value()) }

// RNRTimer returns the timer of an RNR NAK syndrome.
func (s Syndrome) RNRTimer() RNRTimer { return RNRTimer(s.Value()) }

// NAKCode returns the code of a NAK syndrome.
func (s Syndrome) NAKCode() NAKCode { return NAKCode(s.Value()) }

func (s Syndrome) String() string {
	switch s.Type() {
	case AckTypeACK:
		return "ACK credit " + s.CreditCode().String()
	case AckTypeRNRNAK:
		return "RNR NAK " + s.RNRTimer().String()
	case AckTypeNAK:
		return "NAK " + s.NAKCode().String()
	}
	return "reserved syndrome 0x" + strconv.FormatUint(uint64(s), 16)
}

// CreditCode is the 5-bit end-to-end credit field of an ACK. Codes 0-30
// stand for a count of receive WQEs; 31 means the responder does not count
// credits (rxe always sends 31).
type CreditCode uint8

// CreditInvalid is the code for "no credit information".
const CreditInvalid CreditCode = 31

// creditTable is IBTA table 45 as torvalds/linux
// drivers/infiniband/sw/rdmavt/rc.c credit_table has it.
var creditTable = [31]uint32{
	0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384,
	512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
}

// Credits returns the number of receive WQEs c advertises; ok is false for
// CreditInvalid and out-of-range codes.
func (c CreditCode) Credits() (n uint32, ok bool) {
	if int(c) < len(creditTable) {
		return creditTable[c], true
	}
	return 0, false
}

func (c CreditCode) String() string {
	if n, ok := c.Credits(); ok {
		return strconv.FormatUint(uint64(n), 10)
	}
	return "invalid"
}

// CreditCodeFor returns the largest code whose count does not exceed n, so
// a responder never advertises more receive WQEs than it has.
func CreditCodeFor(n uint32) CreditCode {
	c := CreditCode(0)
	for i, v := range creditTable {
		if v > n {
			break
		}
		c = CreditCode(i)
	}
	return c
}

// RNRTimer is the 5-bit minimum RNR NAK timer (IBTA table 45;
// torvalds/linux include/rdma/ib_verbs.h IB_RNR_TIMER_*).
type RNRTimer uint8

// rnrMicros holds the timer values in microseconds. rxe's rnrnak_usec[]
// has 61410 for code 25, a typo for 61440 (61.44 ms in ib_verbs.h).
var rnrMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}

// Microseconds returns how long t asks the requester to wait.
func (t RNRTimer) Microseconds() uint32 { return rnrMicros[t&0x1F] }

// Duration returns Microseconds as a time.Duration.
func (t RNRTimer) Duration() time.Duration {
	return time.Duration(t.Microseconds()) * time.Microsecond
}

func (t RNRTimer) String() string {
	return strconv.FormatUint(uint64(t.Microseconds()), 10) + "us"
}

// RNRTimerFor returns the timer with the shortest wait that is at least d,
// or the longest timer (code 0, 655.36 ms) when d exceeds every code.
func RNRTimerFor(d time.Duration) RNRTimer {
	best := RNRTimer(0)
	for code := 1; code < len(rnrMicros); code++ {
		w := time.Duration(rnrMicros[code]) * time.Microsecond
		if w >= d && w < best.Duration() {
			best = RNRTimer(code)
		}
	}
	return best
}

// NAKCode is the 5-bit code of a NAK (IBTA 9.7.5.2.4).
type NAKCode uint8

// NAK codes.
const (
	NAKPSNSequenceError       NAKCode = 0
	NAKInvalidRequest         NAKCode = 1
	NAKRemoteAccessError      NAKCode = 2
	NAKRemoteOperationalError NAKCode = 3
	NAKInvalidRDRequest       NAKCode = 4
)

func (c NAKCode) String() string {
	switch c {
	case NAKPSNSequenceError:
		return "PSN sequence error"
	case NAKInvalidRequest:
		return "invalid request"
	case NAKRemoteAccessError:
		return "remote access error"
	case NAKRemoteOperationalError:
		return "remote operational error"
	case NAKInvalidRDRequest:
		return "invalid RD request"
	}
	return "reserved NAK code " + strconv.FormatUint(uint64(c), 10)
}
