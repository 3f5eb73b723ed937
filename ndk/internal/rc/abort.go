package rc

import "github.com/ndkxdp/ndkxdp/rocev2"

// A QP that fails on its own ends its connection: NdkSendAndInvalidate
// says "the NDK provider at the receiving peer must abort the connection"
// for an invalid token (seed 004), and the same holds for every error
// that moves an RC QP to the error state. The engine only reports it
// (Config.QPFailed); connection management tears the connection down and
// tells the consumer.

// transportFailed reports q's failure with the ib_wc_status behind it,
// once, and only for a connected QP that has not failed or been flushed
// already: a consumer's Flush or Close is not a transport failure.
func (e *Engine) transportFailed(q *QP, wcStatus uint32) {
	if t := &q.t; e.qpFailed != nil && t.connected && !t.failed {
		e.qpFailed(q.cfg.QPN, wcStatus)
	}
}

// nakStatus is the ib_wc_status a responder reports for the fatal NAK it
// sends, as rxe's do_class_ac_error does: the same status its peer's
// requester sees.
func nakStatus(code rocev2.NAKCode) uint32 {
	switch code {
	case rocev2.NAKRemoteAccessError:
		return wcRemAccessErr
	case rocev2.NAKRemoteOperationalError:
		return wcRemOpErr
	}
	return wcRemInvReqErr
}
