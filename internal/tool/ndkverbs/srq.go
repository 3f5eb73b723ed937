package ndkverbs

import (
	"fmt"
	"sync/atomic"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/ndk"
)

// SRQ is an ndk shared receive queue on the Device's PD, as verbs.SRQ.
// Endpoints made on it (verbs.ConnParams.SRQ through this Device's
// Connector or Listener) take their receives from it; each receive
// completes on the receive CQ of the endpoint that took it.
type SRQ struct {
	dev *Device
	srq *ndk.SRQ
	sgl [1]ndk.SGE // poster scratch: one goroutine posts

	posted atomic.Uint64
}

var _ verbs.SRQ = (*SRQ)(nil)

// CreateSRQ makes an SRQ of depth receives of one SGE each on d's PD
// (ndk.PD.CreateSRQ, no limit notification). ndk has SRQs in process
// only: through a daemon it fails.
func (d *Device) CreateSRQ(depth int) (*SRQ, error) {
	s, err := d.PD.CreateSRQ(depth, 1, 0, nil)
	if err != nil {
		return nil, fmt.Errorf("ndkverbs: create srq of depth %d: %w", depth, err)
	}
	return &SRQ{dev: d, srq: s}, nil
}

// Receive implements verbs.SRQ (NdkSrqReceive).
func (s *SRQ) Receive(id uint64, local verbs.Segment) error {
	s.sgl[0] = ndk.SGE{Addr: local.Region.Addr + uint64(local.Off), Length: uint32(local.Len), Token: local.Region.LKey}
	if err := s.srq.Receive(id, s.sgl[:]); err != nil {
		return postErr("srq receive", err)
	}
	s.posted.Add(1)
	return nil
}

// Posted is how many receives Receive has posted.
func (s *SRQ) Posted() uint64 { return s.posted.Load() }

// Close implements verbs.SRQ: ndk.SRQ.Close, which completes once the
// endpoints made on the SRQ are closed.
func (s *SRQ) Close() error {
	s.srq.Close()
	return nil
}

// srqOf returns the ndk SRQ of p.SRQ for an endpoint of d: nil without
// one, an error for an SRQ of another kind or Device.
func (d *Device) srqOf(p verbs.ConnParams) (*SRQ, error) {
	if p.SRQ == nil {
		return nil, nil
	}
	s, ok := p.SRQ.(*SRQ)
	if !ok || s.dev != d {
		return nil, fmt.Errorf("ndkverbs: the SRQ (%T) was not made by this device: %w", p.SRQ, verbs.ErrInvalid)
	}
	return s, nil
}

// CreateSRQ implements verbs.SRQMaker.
func (c *Connector) CreateSRQ(depth int) (verbs.SRQ, error) { return c.Dev.CreateSRQ(depth) }

// CreateSRQ implements verbs.SRQMaker.
func (x *Listener) CreateSRQ(depth int) (verbs.SRQ, error) { return x.dev.CreateSRQ(depth) }

var (
	_ verbs.SRQMaker = (*Connector)(nil)
	_ verbs.SRQMaker = (*Listener)(nil)
)
