package ndk

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cm"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// CMOptions tune the IB CM. Zero fields take the values Linux's rdma_cm
// uses (CMA_CM_RESPONSE_TIMEOUT, CMA_IBOE_PACKET_LIFETIME,
// CMA_MAX_CM_RETRIES), which is what peers expect; shorter timers suit a
// test network. A REQ is resent after 2·2^(PacketLifeTime-8) +
// 2^(ResponseTimeout-8) ms, MaxRetries times, before Connect fails with
// STATUS_IO_TIMEOUT.
type CMOptions struct {
	// ResponseTimeout is the CM response timeout exponent (4.096 µs ·
	// 2^n, 8-31): 0 means 20, about 4.3 s.
	ResponseTimeout int
	// PacketLifeTime is the path's packet lifetime exponent (8-30); it
	// also sets the QP's ACK timeout: 0 means 16.
	PacketLifeTime int
	// MaxRetries is how often a REQ, REP or DREQ is resent (1-15): 0
	// means 15.
	MaxRetries int
	// RetryCount and RNRRetry are the transport retry counts every
	// connection asks for in its REQ (and RNRRetry in its REP), 0-7, as
	// rdma_cm's consumers set retry_count and rnr_retry_count: how often
	// an unacknowledged packet is resent before requests fail with
	// STATUS_IO_TIMEOUT, and how many RNR NAKs are waited out (7: without
	// limit). nil means 7, what rping and perftest ask.
	// Connector.SetRetryCounts overrides them for one connection.
	RetryCount, RNRRetry *int
}

func (o CMOptions) params() (cm.Params, error) {
	p := cm.DefaultParams()
	switch {
	case o.ResponseTimeout != 0 && (o.ResponseTimeout < 8 || o.ResponseTimeout > 31):
		return p, fmt.Errorf("CM ResponseTimeout %d outside 8-31", o.ResponseTimeout)
	case o.PacketLifeTime != 0 && (o.PacketLifeTime < 8 || o.PacketLifeTime > 30):
		return p, fmt.Errorf("CM PacketLifeTime %d outside 8-30", o.PacketLifeTime)
	case o.MaxRetries < 0 || o.MaxRetries > 15:
		return p, fmt.Errorf("CM MaxRetries %d outside 1-15", o.MaxRetries)
	case o.RetryCount != nil && (*o.RetryCount < 0 || *o.RetryCount > 7):
		return p, fmt.Errorf("CM RetryCount %d outside 0-7", *o.RetryCount)
	case o.RNRRetry != nil && (*o.RNRRetry < 0 || *o.RNRRetry > 7):
		return p, fmt.Errorf("CM RNRRetry %d outside 0-7", *o.RNRRetry)
	}
	if o.RetryCount != nil {
		p.RetryCount = uint8(*o.RetryCount)
	}
	if o.RNRRetry != nil {
		p.RNRRetry = uint8(*o.RNRRetry)
	}
	if o.ResponseTimeout != 0 {
		p.CMResponseTimeout = uint8(o.ResponseTimeout)
	}
	if o.PacketLifeTime != 0 {
		p.PacketLifeTime = uint8(o.PacketLifeTime)
	}
	if o.MaxRetries != 0 {
		p.MaxCMRetries = uint8(o.MaxRetries)
	}
	return p, nil
}

// CMStats are the adapter's connection-management counters: MADs by
// attribute, retransmissions, duplicates answered from state, and MADs
// lost locally.
type CMStats struct {
	Sent, Received map[rocev2.AttributeID]uint64
	Retransmits    uint64 // REQ, REP and DREQ resent after a timeout
	Duplicates     uint64 // received MADs answered from state
	Unmatched      uint64 // MADs for no known connection
	Malformed      uint64
	QueueDrops     uint64 // received MADs dropped: the CM's queue was full, or their source was over its share (100,000 a second, REQs 10,000)
	SendDrops      uint64 // MADs dropped because the engine's queue was full
	// Connections the CM holds state for now (up to the end of
	// time-wait); HalfOpen of them passive and not yet established, at
	// most 128 per listener (the CM's listen backlog); TimeWait of them
	// in time-wait, at most 4,096 for the adapter.
	Connections, HalfOpen, TimeWait int
	// TimeWaitEvictions counts connections whose time-wait ended early
	// to keep TimeWait within its bound: a peer ending connections as
	// fast as it may start them; BacklogRefusals the connect requests
	// refused because their listener's backlog was full.
	TimeWaitEvictions, BacklogRefusals uint64
}

// CMStats returns the connection-management counters.
func (a *Adapter) CMStats() CMStats { return a.backend().cmStats() }

// cmError names the ndk call op in an error of package cm. Package cm
// returns *Error already, so its status, detail and cause are kept in one
// *Error rather than nested in a second; any other error becomes the cause.
func cmError(op string, err error) error {
	if err == nil {
		return nil
	}
	var rejErr *RejectError
	if rej := (*cm.RejectError)(nil); errors.As(err, &rej) {
		rejErr = &RejectError{Reason: rej.Reason, PrivateData: rej.PrivateData}
	}
	// withReject keeps the CM's text and adds the REJ for errors.As.
	withReject := func(inner error) error {
		switch {
		case rejErr == nil:
			return inner
		case inner == nil:
			return rejErr
		}
		return &rejected{err: inner, rej: rejErr}
	}
	e, ok := err.(*Error)
	if !ok {
		return &Error{Status: StatusOf(err), Op: op, Err: withReject(err)}
	}
	detail := e.Detail
	switch {
	case e.Op == "" || e.Op == op:
	case detail == "":
		detail = e.Op
	default:
		detail = e.Op + ": " + detail
	}
	return &Error{Status: e.Status, Op: op, Detail: detail, Err: withReject(e.Err)}
}

// RejectError is the cause inside a Connect or Accept error that a peer's
// CM REJ produced: errors.As(err, &rej) gives the REJ's reason (IBTA table
// 108: 8 nobody listens on that port, 28 the peer refused, ...) and its
// private data. The error is also ErrConnectionRefused (a REJ of our REQ)
// or ErrConnectionAborted (a REJ of our REP).
type RejectError struct {
	Reason      rocev2.RejectReason
	PrivateData []byte // the REJ's 148 private-data bytes
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("peer sent REJ reason %d (%v)", e.Reason, e.Reason)
}

// rejected carries a RejectError beside the CM's error, whose text it
// keeps.
type rejected struct {
	err error
	rej *RejectError
}

func (r *rejected) Error() string   { return r.err.Error() }
func (r *rejected) Unwrap() []error { return []error{r.rej, r.err} }

// connections are the connectors, listeners and shared endpoints an
// adapter closes with it.
type connections struct {
	mu         sync.Mutex
	closed     bool
	connectors map[*Connector]struct{}
	listeners  map[*Listener]struct{}
	endpoints  map[*SharedEndpoint]struct{}
}

// track and forget keep the objects the adapter must close with it.
func (c *connections) track(add func()) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("adapter closed")
	}
	if c.connectors == nil {
		c.connectors = map[*Connector]struct{}{}
		c.listeners = map[*Listener]struct{}{}
		c.endpoints = map[*SharedEndpoint]struct{}{}
	}
	add()
	return nil
}

func (c *connections) forget(remove func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		remove()
	}
}

// closeAll closes what the consumer left open; later tracks fail.
func (c *connections) closeAll() {
	c.mu.Lock()
	c.closed = true
	conns, ls, eps := c.connectors, c.listeners, c.endpoints
	c.connectors, c.listeners, c.endpoints = nil, nil, nil
	c.mu.Unlock()
	for x := range conns {
		x.Close()
	}
	for l := range ls {
		l.Close()
	}
	for s := range eps {
		s.Close()
	}
	// Closing cancels what the callbacks might wait for (a pending
	// Accept or Disconnect returns STATUS_CANCELLED), so these waits end
	// once the consumer's callbacks return.
	for x := range conns {
		<-x.done
	}
	for l := range ls {
		<-l.done
	}
}
