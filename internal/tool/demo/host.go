package demo

import (
	"fmt"

	"github.com/ndkxdp/ndkxdp/internal/vethpair"
	"github.com/ndkxdp/ndkxdp/ndk"
)

// demoCQDepth is the depth of a host's receive and initiator CQs.
const demoCQDepth = 8192

// Host is what a phase runs on at one end of the pair: an adapter
// (opened in this process, or dialled at that end's daemon), a protection
// domain and a receive and an initiator CQ.
type Host struct {
	Name    string // the namespace, for messages
	Adapter *ndk.Adapter
	PD      *ndk.PD
	// The receive and initiator CQs, and the demo's waits for them.
	RCQ, ICQ *CQWait
}

// OpenAdapterOn opens ndkxdp on h's veth end from inside h's namespace.
func OpenAdapterOn(h *vethpair.Host, opts ndk.Options) (*ndk.Adapter, error) {
	var a *ndk.Adapter
	if err := h.Do(func() error {
		var err error
		a, err = ndk.Open(h.Link, opts)
		return err
	}); err != nil {
		return nil, fmt.Errorf("open ndkxdp on %s/%s: %w", h.Name, h.Link, err)
	}
	return a, nil
}

// NewHost creates the PD and the CQs on a, which the caller closes
// (and with it what the host made).
func NewHost(name string, a *ndk.Adapter) (*Host, error) {
	x := &Host{Name: name, Adapter: a}
	var err error
	if x.PD, err = a.CreatePD(); err != nil {
		return nil, fmt.Errorf("%s: create PD: %w", name, err)
	}
	if err := x.NewCQs(); err != nil {
		return nil, err
	}
	return x, nil
}

// NewCQs replaces RCQ and ICQ with fresh ones and closes the previous
// ones, whose QPs the caller has closed by then, so that no phase sees
// another's completions, such as the cancelled receives of a closed QP.
func (x *Host) NewCQs() error {
	for _, c := range []*CQWait{x.RCQ, x.ICQ} {
		if c != nil {
			c.cq.Close()
		}
	}
	x.RCQ, x.ICQ = nil, nil
	var err error
	if x.RCQ, err = newCQWait(x.Adapter, demoCQDepth); err != nil {
		return fmt.Errorf("%s: create receive CQ: %w", x.Name, err)
	}
	if x.ICQ, err = newCQWait(x.Adapter, demoCQDepth); err != nil {
		return fmt.Errorf("%s: create initiator CQ: %w", x.Name, err)
	}
	return nil
}
