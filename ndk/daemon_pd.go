package ndk

import "github.com/ndkxdp/ndkxdp/ndk/internal/proto"

func (r *daemonLink) createPD(a *Adapter) (*PD, error) {
	m, err := r.do("create pd", &proto.Request{Op: proto.OpCreatePD})
	if err != nil {
		return nil, err
	}
	pd := &PD{adapter: a, id: m.H, rh: m.H, mrs: make(map[*MR]struct{}), done: make(chan struct{})}
	r.mu.Lock()
	r.pds[m.H] = pd
	r.mu.Unlock()
	return pd, nil
}

func (pd *PD) daemonRegister(buf []byte, flags MRFlag, invalidatable bool) (*MR, error) {
	const op = "register mr"
	r := pd.adapter.daemon
	if len(buf) == 0 {
		return nil, errorf(StatusInvalidParameter, op, "empty buffer")
	}
	ar, off, ok := r.arenaOf(buf)
	if !ok {
		return nil, errorf(StatusNotSupported, op, "a daemon-backed adapter registers only memory the daemon can map: take it from Adapter.Memory or AllocBuffer")
	}
	va := addrOf(buf)
	m, err := r.do(op, &proto.Request{Op: proto.OpRegister, PD: pd.rh, Arena: ar.id, Off: off, Len: uint64(len(buf)), VA: va, Flags: uint32(flags), Invalidatable: invalidatable})
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

func (m *MR) daemonDeregister() error {
	pd := m.pd
	r := pd.adapter.daemon
	pd.mu.Lock()
	if !m.registered {
		pd.mu.Unlock()
		return errorf(StatusInvalidHandle, "deregister mr", "mr %#x not registered", m.tokens.Local)
	}
	m.registered = false
	delete(pd.mrs, m)
	pd.mu.Unlock()
	r.removeMR(m)
	_, err := r.do("deregister mr", &proto.Request{Op: proto.OpDeregister, H: m.rh})
	return err
}

func (pd *PD) daemonClose() {
	pd.mu.Lock()
	if pd.closing {
		pd.mu.Unlock()
		return
	}
	pd.closing = true
	pd.mu.Unlock()
	_, _ = pd.adapter.daemon.do("close pd", &proto.Request{Op: proto.OpClosePD, H: pd.rh})
}

func (pd *PD) daemonClosed() {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if !pd.finished {
		pd.finished = true
		close(pd.done)
	}
	r := pd.adapter.daemon
	r.mu.Lock()
	delete(r.pds, pd.rh)
	r.mu.Unlock()
}

// bufferPool gives a daemon-backed adapter its AllocBuffer pool: 16 MiB
// of shared memory, made on first use.
func (r *daemonLink) bufferPool(a *Adapter) error {
	r.mu.Lock()
	have := a.buffers != nil
	r.mu.Unlock()
	if have {
		return nil
	}
	ar, err := r.newArena(16 << 20)
	if err != nil {
		return err
	}
	r.mu.Lock()
	if a.buffers == nil {
		a.buffers = newBufferPool(ar.seg.Bytes())
	}
	r.mu.Unlock()
	return nil
}
