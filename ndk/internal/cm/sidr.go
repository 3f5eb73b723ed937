package cm

import (
	"context"
	"net/netip"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// Service ID resolution for UD (IBTA 12.11), as rdma_cm does it for its
// UDP port space: the client sends SIDR_REQ with ServiceID RDMA_PS_UDP |
// port and the rdma_cm header first in the private data (cma.c
// cma_resolve_ib_udp), and the server answers SIDR_REP with its UD QP's
// number and Q_Key (cma_send_sidr_rep), or a status saying why not: no
// service on the port, IB_SIDR_UNSUPPORTED (cm.c cm_sidr_req_handler); a
// header that does not match the packet, IB_SIDR_REJECT (rdma_cm's
// handler fails and ib_destroy_cm_id rejects). SIDR keeps no connection:
// each request is answered on its own, a repeated one again.

// RDMAUDPQKey is the Q_Key rdma_cm gives UD QPs of RDMA_PS_UDP
// (RDMA_UDP_QKEY, include/rdma/rdma_cm.h); a Linux client takes no other.
const RDMAUDPQKey = 0x01234567

// SIDR_REQ retransmission as rdma_cm asks for it (cma.c
// cma_resolve_ib_udp: timeout 1 << (CMA_CM_RESPONSE_TIMEOUT - 8) ms,
// CMA_MAX_CM_RETRIES).
const (
	DefaultSIDRTimeout = 4096 * time.Millisecond
	DefaultSIDRRetries = 15
)

// UDService answers SIDR_REQs for one port of the UDP port space.
type UDService struct {
	m         *Manager
	addr      netip.AddrPort
	qpn, qkey uint32
	closed    bool
	answered  uint64
}

// sidrState is the Manager's SIDR bookkeeping, under Manager.mu.
type sidrState struct {
	services map[uint16][]*UDService
	pending  map[uint32]chan *rocev2.CMSIDRRep // by request ID
}

// ServeUD answers SIDR_REQs for local (an unspecified address: every
// address of its family) with qpn and qkey. It fails with
// ADDRESS_ALREADY_EXISTS when the port is served on an overlapping
// address, INVALID_ADDRESS for a foreign or unusable address, and
// INVALID_PARAMETER for port 0 or a QPN outside [2, 2^24).
func (m *Manager) ServeUD(local netip.AddrPort, qpn, qkey uint32) (*UDService, error) {
	const op = "serve ud"
	local = unmap(local)
	a := local.Addr()
	switch {
	case !a.IsValid() || (!a.IsUnspecified() && !usableAddr(a)):
		return nil, ndkpi.Errorf(ndkpi.StatusInvalidAddress, op, nil, "%v cannot be served on", a)
	case local.Port() == 0:
		return nil, ndkpi.Errorf(ndkpi.StatusInvalidParameter, op, nil, "port 0: a UD service needs a port its clients know")
	case qpn <= 1 || qpn > rocev2.PSNMask:
		return nil, ndkpi.Errorf(ndkpi.StatusInvalidParameter, op, nil, "QPN %#x outside [2, 2^24)", qpn)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ndkpi.Errorf(ndkpi.StatusInvalidHandle, op, nil, "manager closed")
	}
	if !a.IsUnspecified() {
		if err := m.checkLocal(a, op); err != nil {
			return nil, err
		}
	}
	if m.sidr.services == nil {
		m.sidr.services = map[uint16][]*UDService{}
	}
	for _, s := range m.sidr.services[local.Port()] {
		b := s.addr.Addr()
		if b == a || (b.Is4() == a.Is4() && (b.IsUnspecified() || a.IsUnspecified())) {
			return nil, ndkpi.Errorf(ndkpi.StatusAddressAlreadyExists, op, nil, "UD port %d already served on %v", local.Port(), b)
		}
	}
	s := &UDService{m: m, addr: local, qpn: qpn, qkey: qkey}
	m.sidr.services[local.Port()] = append(m.sidr.services[local.Port()], s)
	return s, nil
}

// Addr returns the address and port served.
func (s *UDService) Addr() netip.AddrPort { return s.addr }

// Answered returns how many SIDR_REQs the service answered with its QP.
func (s *UDService) Answered() uint64 {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return s.answered
}

// Close stops answering: later requests get IB_SIDR_UNSUPPORTED.
func (s *UDService) Close() {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	port := s.addr.Port()
	list := m.sidr.services[port]
	for i, x := range list {
		if x == s {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(m.sidr.services, port)
	} else {
		m.sidr.services[port] = list
	}
}

// findUDService is findListener for UD services.
func (m *Manager) findUDService(port uint16, dst netip.Addr) *UDService {
	var wild *UDService
	for _, s := range m.sidr.services[port] {
		a := s.addr.Addr()
		switch {
		case a == dst:
			return s
		case a.IsUnspecified() && a.Is4() == dst.Is4():
			wild = s
		}
	}
	return wild
}

// handleSIDRREQ answers a SIDR_REQ; under m.mu.
func (m *Manager) handleSIDRREQ(src PathInfo, tid uint64, req *rocev2.CMSIDRReq) {
	rep := &rocev2.CMSIDRRep{RequestID: req.RequestID, ServiceID: req.ServiceID}
	defer func() { m.send(src, tid, rep) }()
	ps, port, err := rocev2.ParseServiceID(req.ServiceID)
	if err != nil || ps != rocev2.PortSpaceUDP {
		rep.Status = rocev2.SIDRUnsupported
		return
	}
	hdr, herr := rocev2.DecodeCMAHeader(req.PrivateData[:])
	var dst netip.Addr
	if herr == nil {
		dst = hdr.Dst.Unmap()
	}
	s := m.findUDService(port, dst)
	switch {
	case s == nil && herr == nil:
		rep.Status = rocev2.SIDRUnsupported
	case herr != nil, dst != src.LocalIP.Unmap(), hdr.Src.Unmap() != src.RemoteIP.Unmap():
		// rdma_cm's handler finds a bad header, or addresses that are not
		// the packet's, and fails: ib_destroy_cm_id rejects the request.
		rep.Status = rocev2.SIDRReject
	default:
		rep.Status = rocev2.SIDRSuccess
		rep.QPN, rep.QKey = s.qpn, s.qkey
		s.answered++
	}
}

// handleSIDRREP hands a SIDR_REP to the ResolveUD waiting for it; under
// m.mu.
func (m *Manager) handleSIDRREP(rep *rocev2.CMSIDRRep) {
	ch := m.sidr.pending[rep.RequestID]
	if ch == nil {
		m.stats.Unmatched++
		return
	}
	delete(m.sidr.pending, rep.RequestID)
	ch <- rep // buffered: one reply per request
}

// UDTarget is what resolving a UD service gives: where its datagrams go.
type UDTarget struct {
	Path PathInfo // Path.RemoteIP and RemoteMAC address the datagrams
	QPN  uint32
	QKey uint32
}

// ResolveUD asks the peer at the end of path which UD QP serves dst's
// port (SIDR_REQ, rdma_cm's UDP port space), resending after timeout up
// to retries times (0 and 0: DefaultSIDRTimeout and DefaultSIDRRetries).
// It fails with CONNECTION_REFUSED when the peer answers with a status
// other than success (the error says which), IO_TIMEOUT when it never
// answers, CANCELLED when ctx ends, INVALID_HANDLE when the Manager
// closes.
func (m *Manager) ResolveUD(ctx context.Context, path PathInfo, dst netip.AddrPort, timeout time.Duration, retries int) (UDTarget, error) {
	const op = "resolve ud"
	dst = unmap(dst)
	if timeout <= 0 {
		timeout = DefaultSIDRTimeout
	}
	if retries <= 0 {
		retries = DefaultSIDRRetries
	}
	src := path.LocalIP.Unmap()
	if !dst.Addr().IsValid() || dst.Port() == 0 || src.Is4() != dst.Addr().Is4() {
		return UDTarget{}, ndkpi.Errorf(ndkpi.StatusInvalidAddress, op, nil, "cannot resolve %v from %v", dst, src)
	}
	ch := make(chan *rocev2.CMSIDRRep, 1)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return UDTarget{}, ndkpi.Errorf(ndkpi.StatusInvalidHandle, op, nil, "manager closed")
	}
	if m.sidr.pending == nil {
		m.sidr.pending = map[uint32]chan *rocev2.CMSIDRRep{}
	}
	id := m.allocLocalID()
	for m.sidr.pending[id] != nil {
		id = m.allocLocalID()
	}
	m.sidr.pending[id] = ch
	req := &rocev2.CMSIDRReq{RequestID: id, PKey: path.pkey(), ServiceID: rocev2.ServiceID(rocev2.PortSpaceUDP, dst.Port())}
	// The source port is the client's rdma_cm port, which the server only
	// reports; an ephemeral one as rdma_bind_addr would pick.
	hdr := rocev2.CMAHeader{SrcPort: uint16(32768 + m.rng.IntN(28232)), Src: src, Dst: dst.Addr()}
	if err := hdr.Encode(req.PrivateData[:]); err != nil {
		delete(m.sidr.pending, id)
		m.mu.Unlock()
		return UDTarget{}, ndkpi.Errorf(ndkpi.StatusInvalidAddress, op, err, "rdma_cm header")
	}
	mad := m.send(path, m.tidFor(id), req)
	m.unlockAndRun()
	forget := func() {
		m.mu.Lock()
		delete(m.sidr.pending, id)
		m.mu.Unlock()
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for tries := 0; ; {
		select {
		case rep := <-ch:
			if rep.Status != rocev2.SIDRSuccess {
				return UDTarget{}, ndkpi.Errorf(ndkpi.StatusConnectionRefused, op, nil, "%v answered SIDR_REP status %d (%v)", dst, rep.Status, rep.Status)
			}
			return UDTarget{Path: path, QPN: rep.QPN, QKey: rep.QKey}, nil
		case <-ctx.Done():
			forget()
			return UDTarget{}, ndkpi.Errorf(ndkpi.StatusCancelled, op, ctx.Err(), "resolving %v", dst)
		case <-t.C:
			if tries++; tries > retries {
				forget()
				return UDTarget{}, ndkpi.Errorf(ndkpi.StatusIOTimeout, op, nil, "no SIDR_REP from %v after %d retries of %v", dst, retries, timeout)
			}
			m.mu.Lock()
			if m.closed {
				m.mu.Unlock()
				return UDTarget{}, ndkpi.Errorf(ndkpi.StatusInvalidHandle, op, nil, "manager closed")
			}
			m.stats.Retransmits++
			m.sendRaw(path, mad)
			m.unlockAndRun()
			t.Reset(timeout)
		}
	}
}
