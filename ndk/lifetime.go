package ndk

import (
	"errors"
)

// Object lifetime (NDKPI.md §8): "An antecedent closed before its
// successors returns PEND and completes once every successor is closed".
// The antecedents here: the PD of its MRs and QPs (pd.go), the CQs of the
// QPs that complete into them, and the QP of the connector it was given
// to. Each keeps a count of its successors, or a pointer to it, and
// completes its close (its Closed channel) when the last one goes. The
// adapter's Close does not wait for them: it closes everything.

// holdSuccessor counts a new QP against its PD and CQs, or fails if one
// of them is closing.
func holdSuccessor(pd *PD, cqs ...*CQ) error {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.closing {
		return errors.New("pd closed")
	}
	for i, c := range cqs {
		c.mu.Lock()
		if c.closed.Load() {
			c.mu.Unlock()
			releaseCQs(cqs[:i])
			return errors.New("cq closed")
		}
		c.users++
		c.mu.Unlock()
	}
	pd.qps++
	return nil
}

// releaseSuccessor undoes holdSuccessor when a QP closes (or was never
// created).
func releaseSuccessor(pd *PD, cqs ...*CQ) {
	pd.mu.Lock()
	pd.qps--
	pd.maybeFinishLocked()
	pd.mu.Unlock()
	releaseCQs(cqs)
}

func releaseCQs(cqs []*CQ) {
	for _, c := range cqs {
		c.mu.Lock()
		c.users--
		finish := c.users == 0 && c.closed.Load()
		c.mu.Unlock()
		if finish {
			// Not inline: the QP may be closed from this CQ's own
			// callback, which the CQ's close waits for.
			go c.finishClose()
		}
	}
}

// finishClose closes the QP in its engine and releases its antecedents.
func (q *QP) finishClose() error {
	err := q.be.close()
	releaseSuccessor(q.pd, q.rcq, q.icq)
	close(q.done)
	return err
}

// Closed returns a channel closed when the QP's close has completed.
func (q *QP) Closed() <-chan struct{} { return q.done }

// isClosed reports whether the connector's close completed.
func (c *Connector) isClosed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// bindQP makes qp the connector's, so that the QP's close waits for the
// connector's.
func (c *Connector) bindQP(qp *QP) {
	c.mu.Lock()
	c.qp = qp
	c.mu.Unlock()
	qp.conn.Store(c)
}
