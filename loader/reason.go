package loader

import (
	"fmt"
	"strings"

	"github.com/ndkxdp/ndkxdp/bpf"
)

// Reason says why the XDP program gave a frame its verdict. The values are
// the C enum reason in bpf/steer.c, through the bpf2go-generated constants,
// so the two cannot drift apart.
type Reason uint32

const (
	ReasonPassNotIP            = Reason(bpf.SteerReasonREASON_PASS_NOT_IP)
	ReasonPassNotUDP           = Reason(bpf.SteerReasonREASON_PASS_NOT_UDP)
	ReasonPassNotRoCE          = Reason(bpf.SteerReasonREASON_PASS_NOT_ROCE)
	ReasonPassIPFragment       = Reason(bpf.SteerReasonREASON_PASS_IP_FRAGMENT)
	ReasonPassTruncatedL2      = Reason(bpf.SteerReasonREASON_PASS_TRUNCATED_L2)
	ReasonPassTruncatedL3      = Reason(bpf.SteerReasonREASON_PASS_TRUNCATED_L3)
	ReasonPassTruncatedL4      = Reason(bpf.SteerReasonREASON_PASS_TRUNCATED_L4)
	ReasonDropTruncatedBTH     = Reason(bpf.SteerReasonREASON_DROP_TRUNCATED_BTH)
	ReasonDropBadVersion       = Reason(bpf.SteerReasonREASON_DROP_BAD_VERSION)
	ReasonDropUnknownQP        = Reason(bpf.SteerReasonREASON_DROP_UNKNOWN_QP)
	ReasonDropNoSocket         = Reason(bpf.SteerReasonREASON_DROP_NO_SOCKET)
	ReasonRedirect             = Reason(bpf.SteerReasonREASON_REDIRECT)
	ReasonRedirectForeignQueue = Reason(bpf.SteerReasonREASON_REDIRECT_FOREIGN_QUEUE)
	ReasonDropWrongDstMAC      = Reason(bpf.SteerReasonREASON_DROP_WRONG_DST_MAC)
	ReasonDropWrongDstIP       = Reason(bpf.SteerReasonREASON_DROP_WRONG_DST_IP)
	NumReasons                 = int(bpf.SteerReasonREASON_MAX)
)

// reasons names each reason as in bpf/steer.c (without REASON_) and gives
// the verdict the program returns with it.
var reasons = [NumReasons]struct {
	name    string
	verdict Verdict
}{
	ReasonPassNotIP:            {"PASS_NOT_IP", VerdictPass},
	ReasonPassNotUDP:           {"PASS_NOT_UDP", VerdictPass},
	ReasonPassNotRoCE:          {"PASS_NOT_ROCE", VerdictPass},
	ReasonPassIPFragment:       {"PASS_IP_FRAGMENT", VerdictPass},
	ReasonPassTruncatedL2:      {"PASS_TRUNCATED_L2", VerdictPass},
	ReasonPassTruncatedL3:      {"PASS_TRUNCATED_L3", VerdictPass},
	ReasonPassTruncatedL4:      {"PASS_TRUNCATED_L4", VerdictPass},
	ReasonDropTruncatedBTH:     {"DROP_TRUNCATED_BTH", VerdictDrop},
	ReasonDropBadVersion:       {"DROP_BAD_VERSION", VerdictDrop},
	ReasonDropUnknownQP:        {"DROP_UNKNOWN_QP", VerdictDrop},
	ReasonDropNoSocket:         {"DROP_NO_SOCKET", VerdictDrop},
	ReasonRedirect:             {"REDIRECT", VerdictRedirect},
	ReasonRedirectForeignQueue: {"REDIRECT_FOREIGN_QUEUE", VerdictRedirect},
	ReasonDropWrongDstMAC:      {"DROP_WRONG_DST_MAC", VerdictDrop},
	ReasonDropWrongDstIP:       {"DROP_WRONG_DST_IP", VerdictDrop},
}

// String returns the name used in bpf/steer.c without its REASON_ prefix.
func (r Reason) String() string {
	if int(r) < NumReasons {
		return reasons[r].name
	}
	return fmt.Sprintf("Reason(%d)", uint32(r))
}

// Verdict is the XDP action the program returns with reason r.
func (r Reason) Verdict() Verdict {
	if int(r) < NumReasons {
		return reasons[r].verdict
	}
	return 0
}

// Verdict is an XDP action, with the kernel's values (enum xdp_action in
// include/uapi/linux/bpf.h).
type Verdict uint32

const (
	VerdictDrop     Verdict = 1 // XDP_DROP
	VerdictPass     Verdict = 2 // XDP_PASS
	VerdictRedirect Verdict = 4 // XDP_REDIRECT
)

func (v Verdict) String() string {
	switch v {
	case VerdictDrop:
		return "drop"
	case VerdictPass:
		return "pass"
	case VerdictRedirect:
		return "redirect"
	}
	return fmt.Sprintf("Verdict(%d)", uint32(v))
}

// Counters holds the frame counts by reason, summed over CPUs.
type Counters [NumReasons]uint64

// Verdict returns the number of frames that got verdict v.
func (c *Counters) Verdict(v Verdict) uint64 {
	var n uint64
	for r, count := range c {
		if Reason(r).Verdict() == v {
			n += count
		}
	}
	return n
}

// String formats the counters as a table, one reason per line, for logs and
// the CLI.
func (c *Counters) String() string {
	var b strings.Builder
	for r, count := range c {
		fmt.Fprintf(&b, "%-8s %-22s %d\n", Reason(r).Verdict(), Reason(r), count)
	}
	return b.String()
}
