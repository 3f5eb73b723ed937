package rc

import (
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
)

// Local operations: NdkFastRegister, NdkBind and NdkInvalidate. They are
// work requests on the initiator queue with no packet on the wire
// (IB_WR_REG_MR, IB_WR_BIND_MW, IB_WR_LOCAL_INV).
//
// Each one acts on the token table when it is posted, not when the engine
// reaches it. NDKPI hands the new token out when the post returns
// (NdkGetRemoteTokenFromMw "as soon as NdkBind returns", the MR's token
// "refreshed when NdkFastRegister returns"), and this engine checks the
// local tokens of every SGE at post time: a SEND posted right after a
// FastRegister must find the registration done. Requests posted earlier
// already hold their memory (their SGEs were resolved when they were
// posted), so acting early changes nothing for them. The WQE then only
// carries the outcome: it takes no PSN and completes, in order, when
// every request before it has completed, which keeps completions in
// posting order and ends the QP at the right point after a failure.
//
// FastRegister and Bind fail inline (STATUS_ACCESS_VIOLATION, as NdkBind
// and NdkFastRegister document; nothing changes and no completion
// follows). An Invalidate that finds nothing valid to revoke completes
// with STATUS_INVALID_DEVICE_REQUEST (ND2: "invalidating an unbound MW"),
// which, like every error completion, moves the QP to the error state.

// postLocal executes a local operation and queues its WQE.
func (q *QP) postLocal(wr *SendWR) ndkpi.Status {
	if len(wr.SGL) != 0 {
		return ndkpi.StatusInvalidParameter
	}
	w := q.sq.reserve()
	if w == nil {
		q.sendQueueFull()
		return ndkpi.StatusInsufficientResources
	}
	status := ndkpi.StatusSuccess
	if State(q.state.Load()) == StateError {
		// Completes CANCELLED without acting (ND2 IND2QueuePair).
		status = ndkpi.StatusCancelled
	} else {
		switch wr.Op {
		case OpFastRegister:
			tok, f := q.regions.FastRegisterKeys(q.cfg.PD, wr.MR, wr.RemoteAddr, wr.Buf, wr.Access, wr.Tokens)
			if f != memreg.OK {
				return ndkpi.StatusAccessViolation
			}
			wr.Tokens = tok
		case OpBind:
			r, f := q.regions.BindKey(q.cfg.PD, q.cfg.QPN, wr.MW, wr.MR, wr.RemoteAddr, wr.Length, wr.Access, wr.Tokens.Remote)
			if f != memreg.OK {
				return ndkpi.StatusAccessViolation
			}
			wr.Tokens = memreg.Tokens{Remote: r}
		case OpInvalidate:
			if q.regions.Invalidate(q.cfg.PD, wr.InvalidateToken) != memreg.OK {
				status = ndkpi.StatusInvalidDeviceRequest
			}
		}
	}
	w.op = wr.Op
	w.flags = wr.Flags
	w.nseg = 0
	w.length = 0
	w.localStatus = status
	w.ctx = wr.Context
	q.sq.publish()
	return ndkpi.StatusSuccess
}

// retireLocal completes the local operations at the head of q's send
// queue: they have no PSN, so they complete once every request before
// them has. It reports false if one failed and the QP is now in error.
func (e *Engine) retireLocal(q *QP) bool {
	t := &q.t
	for t.sqHead < t.sqStart {
		w := q.sq.at(t.sqHead)
		if !w.op.local() {
			return true
		}
		if st := w.localStatus; st != ndkpi.StatusSuccess {
			code := uint32(wcLocQPOpErr)
			if st == ndkpi.StatusCancelled {
				code = wcWRFlushErr
			}
			markError(q)
			e.completeSend(q, w, st, code)
			e.enterError(q)
			return false
		}
		e.completeSend(q, w, ndkpi.StatusSuccess, 0)
	}
	return true
}

// readLocalInvalidate is NDK_OP_FLAG_RDMA_READ_LOCAL_INVALIDATE (NDKPI 1.2,
// IB_WR_RDMA_READ_WITH_INV): once the READ's data is all placed, the first
// SGE's local token is invalidated, as a NdkInvalidate posted right after
// it would. A token that cannot be invalidated (not a fast-registered MR,
// or invalid already) fails the READ with STATUS_INVALID_DEVICE_REQUEST
// and the QP with it, as a failed Invalidate does. It reports whether the
// READ may complete successfully.
func (e *Engine) readLocalInvalidate(q *QP, w *sendWQE) bool {
	if e.regions.Invalidate(q.cfg.PD, w.invToken) == memreg.OK {
		return true
	}
	e.fail(q, ndkpi.StatusInvalidDeviceRequest, wcLocQPOpErr)
	return false
}
