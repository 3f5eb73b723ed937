package ndkhost

import (
	"fmt"

	"github.com/ndkxdp/ndkxdp/internal/vethpair"
	"github.com/ndkxdp/ndkxdp/ndk"
)

// DefaultCQDepth is the depth of both CQs when Config.CQDepth is 0.
const DefaultCQDepth = 8192

// Config says how to open a host.
type Config struct {
	// Options are the adapter's (XDP mode, polling, capture, ...).
	Options ndk.Options
	// CQDepth is the depth of the receive and the initiator CQ; 0 means
	// DefaultCQDepth.
	CQDepth int
	// ReceiveNotify, if set, is the receive CQ's notification callback
	// (see ndk.Adapter.CreateCQ); the initiator CQ has none.
	ReceiveNotify func(ndk.Status)
}

// Host is ndkxdp on one end of a veth pair.
type Host struct {
	Net     *vethpair.Host // the namespace and veth end the adapter runs on
	Adapter *ndk.Adapter
	PD      *ndk.PD
	RCQ     *ndk.CQ // receive CQ
	ICQ     *ndk.CQ // initiator CQ

	cfg Config
}

// Open opens the adapter on h's veth end from inside h's namespace, then
// creates the PD and both CQs. On an error it closes what it opened.
func Open(h *vethpair.Host, cfg Config) (*Host, error) {
	if cfg.CQDepth == 0 {
		cfg.CQDepth = DefaultCQDepth
	}
	x := &Host{Net: h, cfg: cfg}
	if err := h.Do(func() error {
		var err error
		x.Adapter, err = ndk.Open(h.Link, cfg.Options)
		return err
	}); err != nil {
		return nil, fmt.Errorf("open ndkxdp on %s/%s: %w", h.Name, h.Link, err)
	}
	var err error
	if x.PD, err = x.Adapter.CreatePD(); err != nil {
		x.Close()
		return nil, fmt.Errorf("%s: create PD: %w", h.Name, err)
	}
	if err := x.NewCQs(); err != nil {
		x.Close()
		return nil, err
	}
	return x, nil
}

// NewCQs replaces RCQ and ICQ with fresh ones of the configured depth and
// closes the previous ones, whose QPs the caller has closed by then. A
// caller that runs phases one after the other uses it so that no phase
// sees another's completions, such as the cancelled receives of a closed
// QP.
func (x *Host) NewCQs() error {
	for _, c := range []*ndk.CQ{x.RCQ, x.ICQ} {
		if c != nil {
			c.Close()
		}
	}
	x.RCQ, x.ICQ = nil, nil
	var err error
	if x.RCQ, err = x.Adapter.CreateCQ(x.cfg.CQDepth, x.cfg.ReceiveNotify); err != nil {
		return fmt.Errorf("%s: create receive CQ: %w", x.Net.Name, err)
	}
	if x.ICQ, err = x.Adapter.CreateCQ(x.cfg.CQDepth, nil); err != nil {
		return fmt.Errorf("%s: create initiator CQ: %w", x.Net.Name, err)
	}
	return nil
}

// Close closes the adapter and with it the PD, the CQs and every object
// created on them.
func (x *Host) Close() { x.Adapter.Close() }
