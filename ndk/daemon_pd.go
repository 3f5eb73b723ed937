package ndk

import "github.com/ndkxdp/ndkxdp/ndk/internal/proto"

// daemonPD is a daemon-backed PD (pdBackend): the daemon's PD applies the
// lifetime rules, and its pd_closed event completes the close. Its handle
// is the PD's id.
type daemonPD struct {
	pd   *PD
	link *daemonLink
}

func (r *daemonLink) createPD() (*PD, error) {
	m, err := tell(r, "create pd", &proto.CreatePD{})
	if err != nil {
		return nil, err
	}
	pd := &PD{adapter: r.a, id: m.H, mrs: make(map[*MR]struct{}), done: make(chan struct{})}
	b := &daemonPD{pd: pd, link: r}
	pd.be = b
	r.mu.Lock()
	r.pds[m.H] = b
	r.mu.Unlock()
	return pd, nil
}

func (b *daemonPD) register(buf []byte, flags MRFlag, invalidatable bool) (*MR, error) {
	const op = "register mr"
	pd, r := b.pd, b.link
	if len(buf) == 0 {
		return nil, errorf(StatusInvalidParameter, op, "empty buffer")
	}
	ar, off, ok := r.arenaOf(buf)
	if !ok {
		return nil, errorf(StatusNotSupported, op, "a daemon-backed adapter registers only memory the daemon can map: take it from Adapter.Memory or AllocBuffer")
	}
	va := addrOf(buf)
	m, err := tell(r, op, &proto.Register{PD: pd.id, Arena: ar.id, Off: off, Len: uint64(len(buf)), VA: va, Flags: uint32(flags), Invalidatable: invalidatable})
	if err != nil {
		return nil, err
	}
	mr := &MR{pd: pd, buf: buf, va: va, flags: flags, rh: m.H, registered: true}
	mr.tokens.Local, mr.tokens.Remote = m.Local, m.Remote
	pd.mu.Lock()
	pd.mrs[mr] = struct{}{}
	pd.mu.Unlock()
	r.addMR(mr)
	return mr, nil
}

func (b *daemonPD) deregister(m *MR) error {
	pd, r := b.pd, b.link
	pd.mu.Lock()
	if !m.registered {
		pd.mu.Unlock()
		return errorf(StatusInvalidHandle, "deregister mr", "mr %#x not registered", m.tokens.Local)
	}
	m.registered = false
	delete(pd.mrs, m)
	pd.mu.Unlock()
	r.removeMR(m)
	_, err := tell(r, "deregister mr", &proto.Deregister{H: m.rh})
	return err
}

func (b *daemonPD) close() {
	pd := b.pd
	pd.mu.Lock()
	if pd.closing {
		pd.mu.Unlock()
		return
	}
	pd.closing = true
	pd.mu.Unlock()
	_, _ = tell(b.link, "close pd", &proto.ClosePD{H: pd.id})
}

// finishIfIdleLocked does nothing: the close completes when the daemon's
// does (closed).
func (b *daemonPD) finishIfIdleLocked() {}

// closed completes the close (the daemon's pd_closed event).
func (b *daemonPD) closed() {
	pd := b.pd
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if !pd.finished {
		pd.finished = true
		close(pd.done)
	}
	r := b.link
	r.mu.Lock()
	delete(r.pds, pd.id)
	r.mu.Unlock()
}

// bufferPool gives a daemon-backed adapter its AllocBuffer pool: 16 MiB
// of shared memory, made on first use.
func (r *daemonLink) bufferPool() (*bufferPool, error) {
	a := r.a
	r.mu.Lock()
	p := a.buffers
	r.mu.Unlock()
	if p != nil {
		return p, nil
	}
	ar, err := r.newArena(16 << 20)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if a.buffers == nil {
		a.buffers = newBufferPool(ar.seg.Bytes(), nil)
	}
	p = a.buffers
	r.mu.Unlock()
	return p, nil
}
