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
	QueueDrops     uint64 // received MADs dropped: the CM's queue was full, or their source was over its share (100,000 a second)
	SendDrops      uint64 // MADs dropped because the engine's queue was full
	// Connections the CM holds state for now (up to the end of
	// time-wait); HalfOpen of them passive and not yet established, at
	// most 128 per listener (the CM's listen backlog).
	Connections, HalfOpen int
}

// CMStats returns the connection-management counters.
func (a *Adapter) CMStats() CMStats {
	m := a.manager()
	if m == nil {
		return CMStats{}
	}
	s := m.Stats()
	queue, send := a.prov.MADDrops()
	return CMStats{Sent: s.Sent, Received: s.Received, Retransmits: s.Retransmits, Duplicates: s.Duplicates,
		Unmatched: s.Unmatched, Malformed: s.Malformed, QueueDrops: queue, SendDrops: send,
		Connections: s.Connections, HalfOpen: s.HalfOpen}
}

// manager returns the adapter's IB CM, or nil without one.
func (a *Adapter) manager() *cm.Manager {
	if a.prov == nil {
		return nil
	}
	return a.prov.Manager()
}

// cmError turns an error of package cm into the ndk error with the same
// NTSTATUS, keeping it as the cause.
func cmError(op string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Status: Status(cm.StatusOf(err)), Op: op, Err: err}
}

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
}
