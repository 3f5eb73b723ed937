package inproc

import (
	"errors"
	"fmt"

	"github.com/ndkxdp/ndkxdp/afxdp"
	"github.com/ndkxdp/ndkxdp/loader"
	"github.com/ndkxdp/ndkxdp/ndk/internal/port"
	"github.com/ndkxdp/ndkxdp/ndk/internal/rc"
)

// What an operator's tools (ndk/daemon's admin requests) read of the
// provider. None of it is on the data path.

// Link returns the wire's description.
func (p *Provider) Link() Link { return p.link }

// XDPMode returns where the steering program runs ("" over an in-memory
// port).
func (p *Provider) XDPMode() string {
	if p.xdp == nil {
		return ""
	}
	return p.xdp.Mode().String()
}

// XDPCounters returns the steering program's counters by reason.
func (p *Provider) XDPCounters() (loader.Counters, error) {
	if p.xdp == nil {
		return loader.Counters{}, errors.New("no XDP program: the adapter runs over an in-memory port")
	}
	return p.xdp.Counters()
}

// Queue is one queue as an operator sees it: how its AF_XDP socket was
// bound and the socket's and the port's counters.
type Queue struct {
	Queue int
	Bind  string // "zero-copy" or "copy"; "" over an in-memory port
	// BindReason says why the socket bound as it did: the kernel's
	// refusal of a zero-copy bind and what the device offers.
	BindReason  string
	MultiBuffer bool
	// EngineCPUs are the CPUs the queue's engine is pinned to; nil when
	// the Go scheduler places it.
	EngineCPUs []int
	Socket     afxdp.Statistics
	SocketErr  error
	Port       port.XSKStats
}

// Queues describes each engine's queue.
func (p *Provider) Queues() []Queue {
	out := make([]Queue, len(p.ports))
	for i, pt := range p.ports {
		out[i].Queue = i
		if i < len(p.engines) {
			out[i].EngineCPUs = p.engines[i].CPUs()
		}
		x, ok := port.Inner(pt).(*port.XSK)
		if !ok {
			continue
		}
		s := x.Socket()
		out[i].Bind, out[i].MultiBuffer = s.Mode().String(), s.MultiBuffer()
		out[i].BindReason = p.bindReason(s)
		out[i].Socket, out[i].SocketErr = s.Stats()
		out[i].Port = x.Stats()
	}
	return out
}

// XDPFeatures says what the device offers XDP and AF_XDP, by the
// kernel's names ("basic redirect rx-sg"), or why the kernel could not
// say; "" over an in-memory port.
func (p *Provider) XDPFeatures() string {
	if p.xdp == nil {
		return ""
	}
	if p.xdpFeaturesErr != nil {
		return "unknown: " + p.xdpFeaturesErr.Error()
	}
	return p.xdpFeatures.String()
}

// XDPZCMaxSegs is the device's xdp_zc_max_segs, how many buffers one
// zero-copy frame may span; 0 where the kernel did not report it (a
// device without xsk-zerocopy, or an in-memory port).
func (p *Provider) XDPZCMaxSegs() uint32 {
	if p.xdp == nil {
		return 0
	}
	return p.xdpZCMaxSegs
}

// bindReason says why s bound in its mode, and which UMEM-resident
// payloads its port sends in place: on every socket a whole AllocBuffer
// buffer that fits a frame, as one descriptor over the pool's headroom
// (port.TxSlots); only on a multi-buffer socket a part of one, as a
// descriptor chain (port.XSK.referable).
func (p *Provider) bindReason(s *afxdp.Socket) string {
	return p.bindModeReason(s) + inPlaceReason(s.Mode(), s.MultiBuffer(), p.xdpZCMaxSegs)
}

// inPlaceReason says what a socket bound in mode, with multi-buffer or
// not, on a device whose xdp_zc_max_segs is zcMaxSegs, sends in place
// when it cannot chain; "" where it can.
func inPlaceReason(mode afxdp.BindMode, multi bool, zcMaxSegs uint32) string {
	const whole = "; in place only whole AllocBuffer buffers, one descriptor each over the pool's headroom"
	switch {
	case multi:
		return ""
	case mode == afxdp.ModeZeroCopy && zcMaxSegs == 1:
		// xp_assign_dev (net/xdp/xsk_buff_pool.c) refuses XDP_USE_SG
		// with XDP_ZEROCOPY here: no configuration of this device
		// chains in zero copy.
		return whole + ": zero copy without multi-buffer, the kernel's limit (xdp_zc_max_segs 1 refuses XDP_USE_SG with XDP_ZEROCOPY)"
	case mode == afxdp.ModeZeroCopy:
		return fmt.Sprintf("%s: no multi-buffer (the MTU fits one frame; xdp_zc_max_segs %d)", whole, zcMaxSegs)
	default:
		return whole + ": no multi-buffer (the MTU fits one frame)"
	}
}

func (p *Provider) bindModeReason(s *afxdp.Socket) string {
	offers := "the device offers xsk-zerocopy"
	switch {
	case p.xdpFeaturesErr != nil:
		offers = "the kernel did not say what the device offers (" + p.xdpFeaturesErr.Error() + ")"
	case !p.xdpFeatures.ZeroCopy():
		offers = "the device's XDP features (" + p.xdpFeatures.String() + ") lack xsk-zerocopy"
	}
	switch {
	case s.Mode() == afxdp.ModeZeroCopy:
		return offers
	case s.SharesUMEM():
		return "bound to the shared UMEM in its first socket's mode; " + offers
	case s.ZeroCopyRefusal() != nil && s.MultiBuffer() && p.xdpZCMaxSegs == 1:
		return "zero-copy bind refused (" + s.ZeroCopyRefusal().Error() + "): multi-buffer needs copy mode, the device's xdp_zc_max_segs is 1; " + offers
	case s.ZeroCopyRefusal() != nil:
		return "zero-copy bind refused (" + s.ZeroCopyRefusal().Error() + "); " + offers
	default:
		return "copy mode requested; " + offers
	}
}

// QP is a QP's snapshot and the queue whose engine runs it.
type QP struct {
	rc.QPInfo
	Queue int
}

// QPs returns a snapshot of every QP, engine by engine.
func (p *Provider) QPs() []QP {
	var out []QP
	for i, e := range p.engines {
		for _, q := range e.QPs() {
			out = append(out, QP{QPInfo: q, Queue: i})
		}
	}
	return out
}

// StartTap offers every frame the ports move to r from now on. It
// returns false, changing nothing, while another capture runs: one at a
// time.
func (p *Provider) StartTap(r *port.TapRing) bool { return p.tap.CompareAndSwap(nil, r) }

// StopTap stops offering frames to r.
func (p *Provider) StopTap(r *port.TapRing) { p.tap.CompareAndSwap(r, nil) }
