package rc

import (
	"fmt"
	"net/netip"
	"sync/atomic"

	"github.com/ndkxdp/ndkxdp/rocev2"
)

// UD multicast (IBTA 10.5.2.3; verbs' ibv_attach_mcast, rxe_mcast.c). A
// UD QP attached to a group takes the datagrams sent to it: destination
// QPN rocev2.MulticastQPN, destination IP the group, destination MAC the
// group's (rocev2.MulticastMAC). Each member checks the datagram as a
// unicast one (P_Key, its own Q_Key) and takes a receive of its own, so
// one datagram may complete on several QPs. The engine that receives the
// datagram delivers it to its own members and forwards a copy to every
// other engine of the adapter that has some (Config.Groups); a forwarded
// copy is delivered where it lands and never forwarded again. A datagram
// for a group without members here or elsewhere counts in UnknownQP, as
// rxe drops one for a group it has no record of.
//
// A datagram for a group is a SEND to the group's address, MAC and
// MulticastQPN. The wire does not bring it back to the adapter that sent
// it, so the sending engine loops a copy back to the adapter's own
// members, as an HCA's multicast loopback (and rxe's, through the
// kernel's IP multicast loopback) does: the sending QP itself too, if it
// is a member, unless QPConfig.BlockSelfLoopback. Joining the group on
// the wire (IGMP, MLD) and steering its frames to the engines is the
// adapter's.

// AttachMulticast makes a UD QP a member of group, an IPv4 or IPv6
// multicast address. Attaching a member again does nothing, as verbs.
func (q *QP) AttachMulticast(group netip.Addr) error {
	group = group.Unmap()
	if !q.cfg.UD {
		return fmt.Errorf("%w: attach multicast: not a UD QP", ErrBadConfig)
	}
	if !group.IsMulticast() {
		return fmt.Errorf("%w: attach multicast: %v is not a multicast address", ErrBadConfig, group)
	}
	e := q.eng
	var err error
	derr := e.do(func() {
		if e.qps[q.cfg.QPN] != q {
			err = fmt.Errorf("%w: attach multicast: QP closed", ErrBadState)
			return
		}
		for _, g := range q.t.groups {
			if g == group {
				return
			}
		}
		q.t.groups = append(q.t.groups, group)
		e.mcast[group] = append(e.mcast[group], q)
	})
	if derr != nil {
		return derr
	}
	return err
}

// DetachMulticast ends q's membership of group; it fails with
// ErrNotAttached if q is not a member.
func (q *QP) DetachMulticast(group netip.Addr) error {
	group = group.Unmap()
	e := q.eng
	found := false
	derr := e.do(func() {
		for i, g := range q.t.groups {
			if g == group {
				q.t.groups = append(q.t.groups[:i], q.t.groups[i+1:]...)
				e.leave(q, group)
				found = true
				return
			}
		}
	})
	switch {
	case derr != nil:
		return derr
	case !found:
		return fmt.Errorf("%w: %v", ErrNotAttached, group)
	}
	return nil
}

// ErrNotAttached is DetachMulticast's error for a group the QP is not a
// member of.
var ErrNotAttached = fmt.Errorf("rc: QP not attached to the multicast group")

// MulticastGroups returns the groups q is attached to.
func (q *QP) MulticastGroups() []netip.Addr {
	var out []netip.Addr
	_ = q.eng.do(func() { out = append(out, q.t.groups...) })
	return out
}

// leave takes q out of group's members; engine goroutine.
func (e *Engine) leave(q *QP, group netip.Addr) {
	m := removeQP(e.mcast[group], q)
	if len(m) == 0 {
		delete(e.mcast, group)
		return
	}
	e.mcast[group] = m
}

// detachAll ends every membership of q, as a QP's destruction does in
// verbs; engine goroutine.
func (e *Engine) detachAll(q *QP) {
	for _, g := range q.t.groups {
		e.leave(q, g)
	}
	q.t.groups = nil
}

// loopMulticast gives the datagram q has just sent (the frame emit
// built from q's headers and payload) to the adapter's members of its
// group: this engine's, and through forwarding the others'.
func (e *Engine) loopMulticast(q *QP, payload []byte) {
	group := q.t.hdr.IP.Dst.Unmap()
	if mac, _ := rocev2.MulticastMAC(group); q.t.hdr.Eth.Dst != mac {
		return // not a frame a member takes (mcastReceive)
	}
	if len(e.mcast[group]) == 0 && (e.groups == nil || len(e.groups(group)) == 0) {
		return
	}
	hl, err := q.t.hdr.EncodeHeaders(e.loop, len(payload))
	pad := rocev2.PadCount(len(payload))
	if err != nil || hl+len(payload)+pad+rocev2.ICRCLen > len(e.loop) {
		return
	}
	n := hl + copy(e.loop[hl:], payload)
	n += copy(e.loop[n:], e.tbuf[:pad+rocev2.ICRCLen]) // emit's pad and ICRC
	frame := e.loop[:n]
	// The engine's packet is free between receive batches; keep it as it
	// was all the same.
	saved := e.pkt
	if rocev2.ParseVerified(frame, &e.pkt) == nil {
		skip := (*QP)(nil)
		if q.cfg.BlockSelfLoopback {
			skip = q
		}
		e.mcastDeliver(frame, true, skip, false)
	}
	e.pkt = saved
}

// mcastReceive takes a UD datagram for MulticastQPN.
func (e *Engine) mcastReceive(frame []byte, mayForward bool) {
	e.mcastDeliver(frame, mayForward, nil, true)
}

// mcastDeliver gives the datagram in e.pkt to the group's members but
// skip, forwarding it first when mayForward; count: a datagram nobody
// takes is an unknown-QP drop.
func (e *Engine) mcastDeliver(frame []byte, mayForward bool, skip *QP, count bool) {
	p := &e.pkt
	group := p.IP.Dst.Unmap()
	forwarded := false
	if mayForward && e.groups != nil {
		for _, o := range e.groups(group) {
			if o != e && o.inbox != nil {
				e.forwardTo(o, frame)
				forwarded = true
			}
		}
	}
	members := e.mcast[group]
	if len(members) == 0 {
		if !forwarded && count {
			atomic.AddUint64(&e.c.UnknownQP, 1)
		}
		return
	}
	if mac, _ := rocev2.MulticastMAC(group); p.Eth.Dst != mac {
		// Addressed to the group's IP but not its MAC: no sender that
		// follows RFC 1112 or 2464 builds such a frame.
		atomic.AddUint64(&e.c.WrongDestination, 1)
		return
	}
	for _, q := range members {
		if q != skip {
			e.udDeliver(q, false)
		}
	}
}

// Engine returns the engine q runs on.
func (q *QP) Engine() *Engine { return q.eng }
