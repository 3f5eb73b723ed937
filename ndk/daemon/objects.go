package daemon

import (
	"encoding/json"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
	"github.com/ndkxdp/ndkxdp/ndk/internal/shm"
)

// The client's objects, each the daemon adapter's object plus what the
// relay and the control path keep for it.
type (
	sPD struct {
		h  uint32
		pd *ndk.PD
	}
	sMR struct {
		h  uint32
		mr *ndk.MR
	}
	sMW struct {
		h  uint32
		mw *ndk.MW
	}
	sConnector struct {
		h  uint32
		c  *ndk.Connector
		qp atomic.Pointer[sQP] // the QP of its Connect or Accept
	}
	sListener struct {
		h uint32
		l *ndk.Listener
	}
	sEndpoint struct {
		h  uint32
		se *ndk.SharedEndpoint
	}
)

func (ss *session) stats(*call, *proto.Stats) (*proto.StatsReply, error) {
	a := ss.srv.a
	raw, err := json.Marshal(a.Stats())
	if err != nil {
		return nil, err
	}
	raw2, err := json.Marshal(a.CMStats())
	if err != nil {
		return nil, err
	}
	return &proto.StatsReply{Raw: raw, Raw2: raw2}, nil
}

func (ss *session) createPD(*call, *proto.CreatePD) (*proto.Handle, error) {
	pd, err := ss.srv.a.CreatePD()
	if err != nil {
		return nil, err
	}
	p := &sPD{pd: pd}
	if p.h, err = ss.add(p); err != nil {
		pd.Close()
		return nil, err
	}
	return &proto.Handle{H: p.h}, nil
}

func (ss *session) closePD(_ *call, r *proto.ClosePD) (*proto.None, error) {
	p, err := lookup[*sPD](ss, r.H)
	if err != nil {
		return nil, err
	}
	p.pd.Close()
	ss.whenClosed(p.pd.Closed(), p.h, proto.EvPDClosed)
	return nil, nil
}

func (ss *session) deregister(_ *call, r *proto.Deregister) (*proto.None, error) {
	m, err := lookup[*sMR](ss, r.H)
	if err != nil {
		return nil, err
	}
	// As in initFastMR: a fast MR's fields are the relay's too.
	if err := ss.relay.hold(m.mr.Deregister); err != nil {
		return nil, err
	}
	ss.drop(r.H, resMRs, resTokens)
	return nil, nil
}

func (ss *session) closeQP(_ *call, r *proto.CloseQP) (*proto.None, error) {
	q, err := lookup[*sQP](ss, r.H)
	if err != nil {
		return nil, err
	}
	ss.relay.removeQP(q)
	err = q.qp.Close()
	ss.leaveAll(q) // the close left the groups
	ss.drop(r.H, resQPs, resMappings)
	q.seg.Close()
	return nil, err
}

func (ss *session) flushQP(_ *call, r *proto.FlushQP) (*proto.None, error) {
	q, err := lookup[*sQP](ss, r.H)
	if err != nil {
		return nil, err
	}
	q.qp.Flush()
	ss.relay.syncState(q)
	return nil, nil
}

func (ss *session) hello(c *call, req *proto.Hello) (*proto.HelloReply, error) {
	fds := c.in
	if ss.relay != nil {
		closeFDs(fds)
		return nil, statusErr(ndk.StatusInvalidDeviceRequest, "second hello")
	}
	if req.Version != proto.Version {
		closeFDs(fds)
		return nil, statusErr(ndk.StatusNDISBadVersion, "%s", proto.VersionMismatch(req.Version, proto.Version))
	}
	if len(fds) > 1 {
		closeFDs(fds)
		return nil, statusErr(ndk.StatusInvalidParameter, "hello brings at most the client's eventfd, not %d descriptors", len(fds))
	}
	efd := -1
	if len(fds) == 1 {
		efd = fds[0]
	}
	if err := ss.take(resMappings); err != nil {
		closeFDs(fds)
		return nil, err
	}
	r, err := newRelay(ss, efd)
	if err != nil {
		ss.give(resMappings)
		return nil, err
	}
	ss.relay = r
	ss.client.Store(true)
	ss.srv.clientsServed.Add(1)
	a := ss.srv.a
	info, err := json.Marshal(a.Info())
	if err != nil {
		return nil, err
	}
	m := &proto.HelloReply{
		Version: proto.Version,
		Addr:    a.LocalAddress().String(),
		MAC:     a.MAC().String(),
		PathMTU: a.PathMTU(),
		Raw:     info,
		Seg:     &proto.Segment{Size: r.seg.Size()},
	}
	c.out = []int{dupFD(r.bell.FD()), dupFD(r.seg.FD())}
	return m, nil
}

func (ss *session) arena(c *call, req *proto.Arena) (*proto.None, error) {
	return nil, ss.mapArena(req, c.in)
}

func (ss *session) mapArena(req *proto.Arena, fds []int) error {
	if len(fds) != 1 {
		closeFDs(fds)
		return statusErr(ndk.StatusInvalidParameter, "arena needs exactly one memfd, got %d descriptors", len(fds))
	}
	if req.Size == 0 || req.Size > maxArenaSize {
		closeFDs(fds)
		return statusErr(ndk.StatusInvalidParameter, "arena of %d bytes (1 to %d)", req.Size, uint64(maxArenaSize))
	}
	ss.mu.Lock()
	_, dup := ss.arenas[req.Arena]
	ss.mu.Unlock()
	if dup || req.Arena == 0 {
		closeFDs(fds)
		return statusErr(ndk.StatusInvalidParameter, "arena %d refused (duplicate or zero)", req.Arena)
	}
	if err := ss.take(resArenas, resMappings); err != nil {
		closeFDs(fds)
		return err
	}
	if err := ss.srv.book.charge(ss.cred.Uid, &ss.held, int64(req.Size), resArenaBytes); err != nil {
		ss.give(resArenas, resMappings)
		closeFDs(fds)
		return err
	}
	seg, err := shm.MapSegment(fds[0], int(req.Size))
	if err != nil {
		ss.give(resArenas, resMappings)
		ss.srv.book.release(ss.cred.Uid, &ss.held, int64(req.Size), resArenaBytes)
		return statusErr(ndk.StatusInvalidParameter, "%v", err)
	}
	unix.Close(seg.TakeFD())
	ss.mu.Lock()
	ss.arenas[req.Arena] = seg
	ss.mu.Unlock()
	return nil
}

func (ss *session) register(_ *call, req *proto.Register) (*proto.TokensReply, error) {
	p, err := lookup[*sPD](ss, req.PD)
	if err != nil {
		return nil, err
	}
	ss.mu.Lock()
	seg := ss.arenas[req.Arena]
	ss.mu.Unlock()
	if seg == nil {
		return nil, statusErr(ndk.StatusInvalidParameter, "no arena %d", req.Arena)
	}
	if req.Len == 0 || req.Off > uint64(seg.Size()) || req.Len > uint64(seg.Size())-req.Off {
		return nil, statusErr(ndk.StatusInvalidParameter, "bytes %d+%d outside arena %d (%d bytes)", req.Off, req.Len, req.Arena, seg.Size())
	}
	buf := seg.Bytes()[req.Off : req.Off+req.Len : req.Off+req.Len]
	if err := ss.take(resMRs, resTokens); err != nil {
		return nil, err
	}
	mr, err := ss.srv.be.RegisterAt(p.pd, req.VA, buf, req.Flags, req.Invalidatable)
	if err != nil {
		ss.give(resMRs, resTokens)
		return nil, err
	}
	x := &sMR{mr: mr}
	if x.h, err = ss.add(x); err != nil {
		_ = mr.Deregister()
		ss.give(resMRs, resTokens)
		return nil, err
	}
	return &proto.TokensReply{H: x.h, Local: mr.LocalToken(), Remote: mr.RemoteToken()}, nil
}

func (ss *session) modifySRQ(_ *call, r *proto.ModifySRQ) (*proto.None, error) {
	x, err := lookup[*sSRQ](ss, r.H)
	if err != nil {
		return nil, err
	}
	return nil, ss.relay.modifySRQ(x, r.Depth, r.Threshold)
}

func (ss *session) srqLen(_ *call, r *proto.SRQLen) (*proto.SRQLenReply, error) {
	x, err := lookup[*sSRQ](ss, r.H)
	if err != nil {
		return nil, err
	}
	return &proto.SRQLenReply{Depth: ss.relay.srqLen(x)}, nil
}

func (ss *session) closeSRQ(_ *call, r *proto.CloseSRQ) (*proto.None, error) {
	x, err := lookup[*sSRQ](ss, r.H)
	if err != nil {
		return nil, err
	}
	if ss.relay.removeSRQ(x) {
		x.srq.Close()
		x.seg.Close()
		ss.give(resMappings)
		ss.whenClosed(x.srq.Closed(), x.h, proto.EvSRQClosed, resSRQs)
	}
	return nil, nil
}

func (ss *session) createMW(_ *call, r *proto.CreateMW) (*proto.TokensReply, error) {
	p, err := lookup[*sPD](ss, r.PD)
	if err != nil {
		return nil, err
	}
	if err := ss.take(resMWs, resTokens); err != nil {
		return nil, err
	}
	mw, err := p.pd.CreateMW()
	if err != nil {
		ss.give(resMWs, resTokens)
		return nil, err
	}
	x := &sMW{mw: mw}
	if x.h, err = ss.add(x); err != nil {
		mw.Close()
		ss.give(resMWs, resTokens)
		return nil, err
	}
	return &proto.TokensReply{H: x.h, Local: ss.srv.be.WindowHandle(mw), Remote: mw.RemoteToken(), KeyBits: ss.srv.be.KeyBits(ss.srv.a)}, nil
}

func (ss *session) closeMW(_ *call, r *proto.CloseMW) (*proto.None, error) {
	x, err := lookup[*sMW](ss, r.H)
	if err != nil {
		return nil, err
	}
	x.mw.Close()
	ss.drop(r.H, resMWs, resTokens)
	return nil, nil
}

// initFastMR is NdkCreateMr(FastRegister=TRUE) for a new handle, then
// NdkInitializeFastRegisterMr.
func (ss *session) initFastMR(_ *call, req *proto.InitFastMR) (*proto.TokensReply, error) {
	var x *sMR
	if req.H != 0 {
		var err error
		if x, err = lookup[*sMR](ss, req.H); err != nil {
			return nil, err
		}
	} else {
		p, err := lookup[*sPD](ss, req.PD)
		if err != nil {
			return nil, err
		}
		if err := ss.take(resMRs, resTokens); err != nil {
			return nil, err
		}
		mr, err := p.pd.CreateMR(true)
		if err != nil {
			ss.give(resMRs, resTokens)
			return nil, err
		}
		x = &sMR{mr: mr}
	}
	// The relay fast-registers the MR in the engine's loop: hold it off
	// while the MR changes here.
	var local, remote uint32
	err := ss.relay.hold(func() error {
		if err := x.mr.InitializeFastRegister(req.Depth, req.Flags&1 != 0); err != nil {
			return err
		}
		local, remote = x.mr.LocalToken(), x.mr.RemoteToken()
		return nil
	})
	if err != nil {
		if x.h == 0 {
			_ = x.mr.Deregister()
			ss.give(resMRs, resTokens)
		}
		return nil, err
	}
	if x.h == 0 {
		var err error
		if x.h, err = ss.add(x); err != nil {
			_ = x.mr.Deregister()
			ss.give(resMRs, resTokens)
			return nil, err
		}
	}
	return &proto.TokensReply{H: x.h, Local: local, Remote: remote, KeyBits: ss.srv.be.KeyBits(ss.srv.a)}, nil
}

// createSRQ is NdkCreateSrq: the daemon's SRQ on the client's PD, and the
// segment with the ring the client posts its receives into.
func (ss *session) createSRQ(c *call, req *proto.CreateSRQ) (*proto.CQReply, error) {
	p, err := lookup[*sPD](ss, req.PD)
	if err != nil {
		return nil, err
	}
	if req.Depth < 1 || req.Depth > proto.MaxSlots {
		return nil, statusErr(ndk.StatusInvalidParameter, "SRQ depth %d outside [1, %d]", req.Depth, proto.MaxSlots)
	}
	if err := ss.take(resSRQs, resMappings); err != nil {
		return nil, err
	}
	x := &sSRQ{}
	relay := ss.relay
	srq, err := p.pd.CreateSRQ(req.Depth, req.RecvSGE, req.Threshold, func(st ndk.Status) {
		relay.notifyEv(proto.EvSRQ, x.hv.Load(), st)
	})
	if err != nil {
		ss.give(resSRQs, resMappings)
		return nil, err
	}
	if err := x.init(srq, req.Depth); err != nil {
		srq.Close()
		ss.give(resSRQs, resMappings)
		return nil, err
	}
	if x.h, err = ss.add(x); err != nil {
		srq.Close()
		x.seg.Close()
		ss.give(resSRQs, resMappings)
		return nil, err
	}
	x.hv.Store(x.h)
	relay.addSRQ(x)
	c.out = []int{x.seg.TakeFD()}
	return &proto.CQReply{H: x.h, Seg: &proto.Segment{Size: x.seg.Size(), Slots: x.layout.Ring.Slots}}, nil
}

func (ss *session) connectOOB(_ *call, req *proto.ConnectOOB) (*proto.None, error) {
	return nil, ss.connectEndpoint(req)
}

func (ss *session) connectEndpoint(req *proto.ConnectOOB) error {
	q, err := lookup[*sQP](ss, req.H)
	if err != nil {
		return err
	}
	if req.Remote == nil {
		return statusErr(ndk.StatusInvalidParameter, "no remote endpoint")
	}
	ip, err := netip.ParseAddr(req.Remote.IP)
	if err != nil {
		return statusErr(ndk.StatusInvalidParameter, "remote address: %v", err)
	}
	ep := ndk.Endpoint{IP: ip, QPN: req.Remote.QPN, PSN: req.Remote.PSN}
	if req.Remote.MAC != "" {
		if ep.MAC, err = net.ParseMAC(req.Remote.MAC); err != nil {
			return statusErr(ndk.StatusInvalidParameter, "remote MAC: %v", err)
		}
	}
	var o ndk.ConnectOptions
	if req.Opts != nil {
		o = ndk.ConnectOptions{
			PathMTU: req.Opts.PathMTU, InboundReadLimit: req.Opts.InboundReadLimit, OutboundReadLimit: req.Opts.OutboundReadLimit,
			AckTimeout: time.Duration(req.Opts.AckTimeoutNs), RetryCount: req.Opts.RetryCount, RNRRetry: req.Opts.RNRRetry,
			MinRNRTimer: time.Duration(req.Opts.MinRNRTimerNs),
		}
		if tc := req.Opts.Traffic; tc != nil {
			o.TrafficClass = &ndk.TrafficClass{DSCP: tc.DSCP, ECN: ndk.ECN(tc.ECN), VLAN: tc.VLAN, VLANID: tc.VLANID, PCP: tc.PCP}
		}
	}
	return q.qp.ConnectOOB(ep, o)
}

// cqState is how a relay sees a client CQ's shared words.
type cqWords struct {
	arm    *atomic.Uint32
	status *atomic.Uint32
}

func (ss *session) createCQ(cl *call, req *proto.CreateCQ) (*proto.CQReply, error) {
	a := ss.srv.a
	if req.Depth < 1 || req.Depth > int(a.Info().MaxCQDepth) {
		return nil, statusErr(ndk.StatusInvalidParameter, "CQ depth %d outside [1, %d]", req.Depth, a.Info().MaxCQDepth)
	}
	if err := ss.take(resCQs, resMappings); err != nil {
		return nil, err
	}
	c, err := newSCQ(ss, req.Depth)
	if err != nil {
		ss.give(resCQs, resMappings)
		return nil, err
	}
	if c.h, err = ss.add(c); err != nil {
		c.cq.Close()
		c.closeSegments()
		ss.give(resCQs, resMappings)
		return nil, err
	}
	ss.relay.addCQ(c)
	cl.out = []int{c.seg.TakeFD()}
	return &proto.CQReply{H: c.h, Seg: &proto.Segment{Size: c.seg.Size(), Slots: c.layout.Ring.Slots}}, nil
}

func (ss *session) createQP(c *call, req *proto.CreateQP) (*proto.QPReply, error) {
	if req.UD {
		// ndk.PD.CreateUDQP's checks come first, as in process.
		if err := checkUDQP(req); err != nil { // ud.go
			return nil, err
		}
	}
	p, err := lookup[*sPD](ss, req.PD)
	if err != nil {
		return nil, err
	}
	rcq, err := lookup[*sCQ](ss, req.RecvCQ)
	if err != nil {
		return nil, err
	}
	scq, err := lookup[*sCQ](ss, req.SendCQ)
	if err != nil {
		return nil, err
	}
	var srq *sSRQ
	if req.SRQ != 0 {
		if srq, err = lookup[*sSRQ](ss, req.SRQ); err != nil {
			return nil, err
		}
		if req.Depth != 0 || req.RecvSGE != 0 {
			return nil, statusErr(ndk.StatusInvalidParameter, "a QP on an SRQ has no receive queue: depth and SGEs 0")
		}
	} else if req.Depth < 1 {
		return nil, statusErr(ndk.StatusInvalidParameter, "receive queue depth %d", req.Depth)
	}
	if req.Depth < 0 || req.SendDepth < 1 || req.Depth > proto.MaxSlots || req.SendDepth > proto.MaxSlots {
		return nil, statusErr(ndk.StatusInvalidParameter, "queue depths %d/%d", req.Depth, req.SendDepth)
	}
	if err := ss.take(resQPs, resMappings); err != nil {
		return nil, err
	}
	q, err := newSQP(ss, p, rcq, scq, srq, req)
	if err != nil {
		ss.give(resQPs, resMappings)
		return nil, err
	}
	if q.h, err = ss.add(q); err != nil {
		q.qp.Close()
		q.seg.Close()
		ss.give(resQPs, resMappings)
		return nil, err
	}
	if err := ss.relay.addQP(q); err != nil {
		ss.drop(q.h, resQPs, resMappings)
		q.qp.Close()
		q.seg.Close()
		return nil, err
	}
	m := &proto.QPReply{
		H: q.h, QPN: q.qp.QPN(), PSN: q.qp.LocalEndpoint().PSN, Queue: q.qp.Queue(), Slot: q.slot,
		Seg:        &proto.Segment{Size: q.seg.Size(), SendSlots: q.layout.Send.Slots, RecvSlots: q.layout.Recv.Slots},
		MaxMessage: q.qp.UDMaxMessage(), // 0 but for a UD QP
	}
	c.out = []int{q.seg.TakeFD()}
	return m, nil
}

func dupFD(fd int) int {
	n, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return n
}

func (ss *session) moderateCQ(_ *call, r *proto.ModerateCQ) (*proto.None, error) {
	c, err := lookup[*sCQ](ss, r.H)
	if err != nil {
		return nil, err
	}
	// The relay raises the client's notifications (fireArm), so it holds
	// them; the client mapped NDKPI's values to these bounds.
	if r.Timeout < 0 || r.Depth < 0 {
		return nil, statusErr(ndk.StatusInvalidParameter, "moderation %v, %d: negative", time.Duration(r.Timeout), r.Depth)
	}
	c.modInterval.Store(r.Timeout)
	c.modCount.Store(uint64(r.Depth))
	return nil, nil
}

func (ss *session) closeCQ(_ *call, r *proto.CloseCQ) (*proto.None, error) {
	c, err := lookup[*sCQ](ss, r.H)
	if err != nil {
		return nil, err
	}
	ss.relay.removeCQ(c)
	c.cq.Close()
	if c.rseg != c.seg {
		ss.give(resMappings) // the resized ring's
	}
	ss.drop(r.H, resCQs, resMappings)
	c.closeSegments()
	return nil, nil
}

func (ss *session) resizeCQ(cl *call, r *proto.ResizeCQ) (*proto.ResizeCQReply, error) {
	c, err := lookup[*sCQ](ss, r.H)
	if err != nil {
		return nil, err
	}
	if r.Depth < 1 || r.Depth > int(ss.srv.a.Info().MaxCQDepth) {
		return nil, statusErr(ndk.StatusInvalidParameter, "CQ depth %d outside [1, %d]", r.Depth, ss.srv.a.Info().MaxCQDepth)
	}
	// The first resize keeps the first segment (its arm and status words)
	// mapped beside the new ring: one mapping more; a later one replaces
	// the ring's.
	first := c.rseg == c.seg
	if first {
		if err := ss.take(resMappings); err != nil {
			return nil, err
		}
	}
	seg, l, err := ss.relay.resize(c, r.Depth)
	if err != nil {
		if first {
			ss.give(resMappings)
		}
		return nil, err
	}
	cl.out = []int{seg.TakeFD()}
	return &proto.ResizeCQReply{Seg: &proto.Segment{Size: seg.Size(), Slots: l.Ring.Slots}}, nil
}
