package perftest

import (
	"errors"
	"fmt"
	"time"
)

// -c UC (perftest's connection type UC): the data QPs are
// unreliable-connection QPs (verbs.ConnParams.UC), connected out of band
// as RC ones are without -R, the control messages over TCP or, with -z,
// through rdma_cm; pingpong_dest the same. perftest refuses -R with UC
// ("UC is not supported in librdmacm"), and so does this package; a
// client that would try rdma_cm first (CommAuto) talks TCP at once. perftest takes UC for its send and write tests
// ("UC connection not possible in READ/ATOMIC verbs"). Nothing
// acknowledges a UC request, so nothing resends a SEND that found no
// receive: a send test's receiver posts as many receives as the
// iterations, up to UCMaxRx, unless -r says otherwise (perftest's
// rx_depth rule for UC), and a message lost on the way is lost to the
// test. perftest's receiver then waits for it for good; ours, once SENDs
// arrived and then none for UCStall/2 to UCStall, ends with ErrUCLost,
// saying how many arrived.

// UCMaxRx is the most receives a -c UC send test posts by default:
// perftest's UC_MAX_RX is 16000; an ndk QP's receive queue holds 4096
// (ndk.AdapterInfo.MaxReceiveQueueDepth), so the endpoints of a UC run
// need that depth (ndkverbs.Depths.Receive).
const UCMaxRx = 4096

func (p *Params) normalizeUC() error {
	if !p.UC {
		return nil
	}
	switch {
	case p.UD:
		return fmt.Errorf("perftest: -c is UC or UD, not both: %w", ErrUnsupported)
	case p.Verb == Read || p.Verb == Atomic:
		return fmt.Errorf("perftest: UC connection not possible in READ/ATOMIC verbs (perftest's words; -c UC runs the send and write tests): %w", ErrUnsupported)
	case p.Comm == CommRDMACM:
		return fmt.Errorf("perftest: UC is not supported in librdmacm (perftest's words: -R refuses -c UC; -z takes it): %w", ErrUnsupported)
	case p.Comm == CommAuto:
		// Without -R perftest talks TCP; rdma_cm makes no UC data QP.
		p.Comm = CommTCP
	}
	return nil
}

// UCStall is how long a -c UC send bw receiver that has received waits
// for the next SEND before it counts the rest lost.
const UCStall = 5 * time.Second

// ErrUCLost is a -c UC send test whose SENDs did not all arrive.
var ErrUCLost = errors.New("perftest: SENDs lost on an unreliable connection")
