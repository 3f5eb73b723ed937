package ndk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/client"
	"github.com/ndkxdp/ndkxdp/ndk/internal/proto"
	"github.com/ndkxdp/ndkxdp/ndk/internal/shm"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// daemonLink is a daemon-backed adapter's link to the daemon, and the
// daemon-client provider's adapter (adapterBackend): the control
// connection, the session's doorbell, and the client's half of every
// object, by the handle the daemon gave it.
type daemonLink struct {
	a    *Adapter
	conn *client.Conn
	bell *shm.Doorbell // the session's relay's, in sess
	sess *shm.Segment  // the session's published counts, hint bitmaps, event ring and doorbell
	ev   *daemonEvents
	addr netip.Addr
	hw   net.HardwareAddr
	pmtu int

	mu         sync.RWMutex
	qps        map[uint32]*daemonQP
	cqs        map[uint32]*daemonCQ
	pds        map[uint32]*daemonPD
	connectors map[uint32]*daemonConnector
	listeners  map[uint32]*daemonListener
	arenas     []*arena
	nextArena  uint32
	chunkMu    sync.Mutex
	chunk      *arena // the arena small Memory calls are cut from
	chunkOff   int
	// mrs is every registered MR by local token, for the checks a post
	// makes before it reaches the ring; copied on write, read lock-free.
	mrs atomic.Pointer[map[uint32]*MR]
	// fast is every initialized fast-register MR by its tokens' index
	// (daemon_mem.go), whose keys change with each FastRegister.
	fast    atomic.Pointer[map[uint32]*MR]
	keyBits atomic.Uint32
	srqs    map[uint32]*daemonSRQ
	// gone is set when the daemon went away (watch): every call fails
	// with StatusConnectionReset from then on; goneCh is closed right
	// after, before any callback fires.
	goneFlag atomic.Bool
	goneCh   chan struct{}
}

// arena is client memory the daemon maps: a sealed memfd.
type arena struct {
	id   uint32
	seg  *shm.Segment
	base uint64
}

// Dial connects to the ndkxdp daemon at target ("unix:///run/ndkxdp/IF.sock"
// or a socket path) and returns an adapter that runs on the daemon's
// interface: the same API and rules as an adapter from Open. Its QPs post
// into rings shared with the daemon and its CQs are polled from shared
// rings, with no system call while the daemon's relay is awake; control
// calls (create, close, register, connect) are messages on the socket.
//
// Memory a daemon-backed adapter registers must be memory the daemon can
// map: Adapter.Memory and AllocBuffer give it; RegisterMR or FastRegister
// of other memory fails with STATUS_NOT_SUPPORTED. SRQs, memory windows
// and fast registration follow the in-process rules (daemon_mem.go).
//
// It fails with STATUS_NDIS_ADAPTER_NOT_READY when no daemon answers and
// STATUS_NDIS_BAD_VERSION, naming both versions, when the daemon speaks
// another version of the protocol. When the daemon goes away later, however it ends, the adapter learns at once
// from the socket's hangup: armed CQs notify, connectors get their
// disconnect, Gone is closed, and every call fails with
// STATUS_CONNECTION_RESET (Err).
func Dial(ctx context.Context, target string) (*Adapter, error) {
	const op = "dial daemon"
	path, err := client.ParseTarget(target)
	if err != nil {
		return nil, &Error{Status: StatusInvalidParameter, Op: op, Err: err}
	}
	cfg := defaultConfig()
	// The daemon's adapter holds the token table; the client's would be
	// half a megabyte of nothing.
	cfg.regions = 1
	a, err := newAdapter(cfg)
	if err != nil {
		return nil, err
	}
	r := &daemonLink{
		a: a, qps: make(map[uint32]*daemonQP), cqs: make(map[uint32]*daemonCQ), pds: make(map[uint32]*daemonPD),
		connectors: make(map[uint32]*daemonConnector), listeners: make(map[uint32]*daemonListener),
		goneCh: make(chan struct{}),
	}
	r.mrs.Store(&map[uint32]*MR{})
	r.fast.Store(&map[uint32]*MR{})
	r.srqs = make(map[uint32]*daemonSRQ)
	if r.conn, err = client.Dial(ctx, path, r.event); err != nil {
		return nil, &Error{Status: StatusNDISAdapterNotReady, Op: op, Detail: path, Err: err}
	}
	// The event reader sleeps on this eventfd; the daemon rings it after
	// it puts a notification into the session's event ring.
	efd, err := shm.NewEventfd()
	if err != nil {
		r.conn.Close()
		return nil, &Error{Status: StatusInsufficientResources, Op: op, Err: err}
	}
	m, fds, err := ask(r, ctx, op, &proto.Hello{Version: proto.Version}, efd)
	if err == nil && m.Version != proto.Version {
		closeFDs(fds)
		err = &Error{Status: StatusNDISBadVersion, Op: op, Err: errors.New(proto.VersionMismatch(proto.Version, m.Version))}
	}
	if err != nil {
		unix_close(efd)
		r.conn.Close()
		if e := (*Error)(nil); errors.As(err, &e) && e.Status == StatusNDISBadVersion {
			e.Detail = path
		}
		return nil, err
	}
	if err := r.hello(m, fds); err != nil {
		unix_close(efd)
		r.conn.Close()
		return nil, &Error{Status: StatusNDISAdapterNotReady, Op: op, Detail: path, Err: err}
	}
	if err := r.startEvents(efd); err != nil {
		unix_close(efd)
		r.conn.Close()
		return nil, &Error{Status: StatusNDISAdapterNotReady, Op: op, Detail: path, Err: err}
	}
	a.be = r
	go r.watch()
	return a, nil
}

// watch fails the adapter when its daemon goes away. The kernel hangs up
// the daemon's end of the socket when the daemon exits, however it
// exits, which ends the connection's reader at once; without this, an
// armed CQ or a connection would wait for a daemon that will never
// answer, until the caller's own timeout.
func (r *daemonLink) watch() {
	<-r.conn.Done()
	var gone *client.GoneError
	if !errors.As(r.conn.Err(), &gone) {
		return // the adapter closed
	}
	r.goneFlag.Store(true)
	// Gone first: a callback's receiver may look at it at once.
	close(r.goneCh)
	r.mu.RLock()
	cqs := make([]*daemonCQ, 0, len(r.cqs))
	for _, c := range r.cqs {
		cqs = append(cqs, c)
	}
	srqs := make([]*daemonSRQ, 0, len(r.srqs))
	for _, s := range r.srqs {
		srqs = append(srqs, s)
	}
	conns := make([]*daemonConnector, 0, len(r.connectors))
	for _, x := range r.connectors {
		conns = append(conns, x)
	}
	r.mu.RUnlock()
	// Waiters wake first, so that what they do next (Arm, a post) fails
	// with the reason rather than a disconnect that names none.
	for _, c := range cqs {
		if c.notify != nil {
			c.notifyQueue(StatusConnectionReset)
		}
	}
	for _, s := range srqs {
		s.notifyEvent(StatusConnectionReset)
	}
	for _, x := range conns {
		x.disconnected(uint32(DisconnectReasonNone))
	}
}

// Gone returns a channel closed when the daemon of an adapter from Dial
// went away (Err says why): a caller waiting for something only the
// daemon brings, such as a connection request, selects on it. It is nil,
// never ready, for an adapter from Open.
func (a *Adapter) Gone() <-chan struct{} { return a.backend().gone() }

func (r *daemonLink) gone() <-chan struct{} { return r.goneCh }

// Err returns nil while the adapter can work. For an adapter from Dial
// whose daemon went away it returns the error every call fails with from
// then on: StatusConnectionReset, "daemon SOCKET went away".
func (a *Adapter) Err() error { return a.backend().err() }

func (r *daemonLink) err() error {
	if !r.goneFlag.Load() {
		return nil
	}
	return &Error{Status: StatusConnectionReset, Detail: r.conn.Err().Error()}
}

// goneErr is the failure of op on an adapter whose daemon went away.
func (r *daemonLink) goneErr(op string) error {
	return &Error{Status: StatusConnectionReset, Op: op, Err: r.conn.Err()}
}

func (r *daemonLink) hello(m *proto.HelloReply, fds []int) error {
	if len(fds) != 2 || m.Seg == nil || m.Seg.Size < proto.SessionSize {
		closeFDs(fds)
		return errors.New("daemon sent no session segment")
	}
	var info AdapterInfo
	if err := json.Unmarshal(m.Raw, &info); err != nil {
		closeFDs(fds)
		return fmt.Errorf("adapter info: %w", err)
	}
	var err error
	if r.addr, err = netip.ParseAddr(m.Addr); err != nil {
		closeFDs(fds)
		return fmt.Errorf("adapter address: %w", err)
	}
	r.hw, _ = net.ParseMAC(m.MAC)
	r.pmtu = m.PathMTU
	if r.sess, err = shm.MapSegment(fds[1], proto.SessionSize); err != nil {
		unix_close(fds[0])
		return err
	}
	if r.bell, err = shm.NewDoorbell(r.sess, proto.RelayBell, fds[0]); err != nil {
		unix_close(fds[0])
		r.sess.Close()
		r.sess = nil
		return err
	}
	r.a.info = info
	return nil
}

// ask sends a typed request and returns its typed reply, or the NDK error
// of its failure.
func ask[P any](r *daemonLink, ctx context.Context, op string, req proto.Call[P], fds ...int) (*P, []int, error) {
	p, rfds, err := client.Do(ctx, r.conn, req, fds...)
	if err != nil {
		return nil, nil, r.failure(ctx, op, err)
	}
	return p, rfds, nil
}

// tell is ask without a context, for requests the daemon answers at once
// and that bring no descriptors back.
func tell[P any](r *daemonLink, op string, req proto.Call[P]) (*P, error) {
	p, fds, err := ask(r, context.Background(), op, req)
	closeFDs(fds)
	return p, err
}

// failure is the NDK error of a request that failed with err: the daemon
// went away, refused the request, or could not be asked.
func (r *daemonLink) failure(ctx context.Context, op string, err error) error {
	var gone *client.GoneError
	if errors.As(err, &gone) {
		return &Error{Status: StatusConnectionReset, Op: op, Err: err}
	}
	var refused *client.Refused
	if !errors.As(err, &refused) {
		return &Error{Status: StatusNDISAdapterNotReady, Op: op, Detail: "daemon", Err: err}
	}
	m := refused.Reply
	if Status(m.Status) == StatusCancelled {
		// The daemon gave up because ctx ended (its own timer for ctx's
		// deadline may fire first): the error wraps ctx's, as in
		// process.
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			<-ctx.Done()
		}
		if ctx.Err() != nil {
			return &Error{Status: StatusCancelled, Op: op, Detail: "context ended first", Err: ctx.Err()}
		}
	}
	var cause error
	if m.Msg != "" {
		cause = errors.New(m.Msg)
	}
	if m.RejReason != 0 {
		if cause == nil {
			cause = errors.New(rocev2.RejectReason(m.RejReason).String())
		}
		// The daemon's CM was refused: the same RejectError as in
		// process, so callers can tell reason 8 (nobody listens yet)
		// from a refusal.
		cause = &rejected{err: cause, rej: &RejectError{Reason: rocev2.RejectReason(m.RejReason), PrivateData: m.RejData}}
	}
	return &Error{Status: Status(m.Status), Op: op, Detail: m.Detail, Err: cause}
}

// event takes the daemon's events, on the connection's reader goroutine.
func (r *daemonLink) event(m *proto.Message) {
	r.mu.RLock()
	c, l, x, pd, q := r.cqs[m.H], r.listeners[m.H], r.connectors[m.H], r.pds[m.H], r.qps[m.H]
	s := r.srqs[m.H]
	r.mu.RUnlock()
	switch m.Ev {
	case proto.EvCQ:
		if c != nil {
			c.notifyQueue(Status(m.Status))
		}
	case proto.EvIncoming:
		if l != nil {
			l.incoming(m)
		}
	case proto.EvDisconnect:
		if x != nil {
			x.disconnected(m.Reason)
		}
	case proto.EvConnectorClosed:
		if x != nil {
			go x.closed()
		}
	case proto.EvListenerClosed:
		if l != nil {
			go l.closed()
		}
	case proto.EvPeerWrite:
		if q != nil {
			q.peerWrite()
		}
	case proto.EvSRQ:
		if s != nil {
			s.notifyEvent(Status(m.Status))
		}
	case proto.EvSRQClosed:
		if s != nil {
			go s.closed()
		}
	case proto.EvPDClosed:
		if pd != nil {
			go pd.closed()
		}
	}
}

// ring wakes the daemon's relay for work just posted or an arm.
func (r *daemonLink) ring() { r.bell.Ring() }

// Memory returns n bytes of memory the adapter can register in either
// mode: on an adapter from Open, Go memory; on a daemon-backed adapter,
// a shared memfd the daemon maps, so that requests move it without a copy
// between the processes. It lives until the adapter closes.
func (a *Adapter) Memory(n int) ([]byte, error) {
	if n < 1 {
		return nil, errorf(StatusInvalidParameter, "memory", "length %d", n)
	}
	return a.backend().memory(n)
}

func (r *daemonLink) memory(n int) ([]byte, error) {
	if n <= memoryChunk/4 {
		return r.carve(n)
	}
	ar, err := r.newArena(n)
	if err != nil {
		return nil, err
	}
	return ar.seg.Bytes()[:n:n], nil
}

// memoryChunk is the arena small Memory calls are cut from: the daemon
// maps a bounded number of arenas per client (256), and a memfd per small
// buffer would spend them, and a system call each.
const memoryChunk = 4 << 20

// carve cuts n bytes, cache-line aligned, from the current chunk, or from
// a new one when it has no room.
func (r *daemonLink) carve(n int) ([]byte, error) {
	r.chunkMu.Lock()
	defer r.chunkMu.Unlock()
	if r.chunk == nil || r.chunkOff+n > r.chunk.seg.Size() {
		ar, err := r.newArena(memoryChunk)
		if err != nil {
			return nil, err
		}
		r.chunk, r.chunkOff = ar, 0
	}
	b := r.chunk.seg.Bytes()[r.chunkOff : r.chunkOff+n : r.chunkOff+n]
	r.chunkOff = (r.chunkOff + n + 63) &^ 63
	return b, nil
}

func (r *daemonLink) newArena(n int) (*arena, error) {
	const op = "memory"
	seg, err := shm.NewSegment("ndkxdp-memory", n)
	if err != nil {
		return nil, &Error{Status: StatusInsufficientResources, Op: op, Err: err}
	}
	r.mu.Lock()
	r.nextArena++
	ar := &arena{id: r.nextArena, seg: seg, base: addrOf(seg.Bytes())}
	r.mu.Unlock()
	if _, fds, err := ask(r, context.Background(), op, &proto.Arena{Arena: ar.id, Size: uint64(seg.Size())}, seg.FD()); err != nil {
		seg.Close()
		return nil, err
	} else {
		closeFDs(fds)
	}
	unix_close(seg.TakeFD()) // the daemon has its own; the mapping stays
	r.mu.Lock()
	r.arenas = append(r.arenas, ar)
	r.mu.Unlock()
	return ar, nil
}

// arenaOf finds the arena holding buf, and buf's offset in it.
func (r *daemonLink) arenaOf(buf []byte) (*arena, uint64, bool) {
	p := addrOf(buf)
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, ar := range r.arenas {
		if p >= ar.base && p-ar.base < uint64(ar.seg.Size()) && uint64(len(buf)) <= uint64(ar.seg.Size())-(p-ar.base) {
			return ar, p - ar.base, true
		}
	}
	return nil, 0, false
}

// localAccess is what a request does with the memory an SGE names, for
// checkLocal.
type localAccess int

const (
	localRead  localAccess = iota // the source of a SEND or WRITE
	localWrite                    // a receive's buffer
	readSink                      // where a READ's (or atomic's) response lands
)

// checkLocal is the engine's local token check (memreg.CheckLocal) made
// before a request is posted: the post must fail inline, as it does in
// process. The daemon checks again. A read sink needs LOCAL_WRITE or
// RDMA_READ_SINK, since the adapter sets RDMA_READ_SINK_NOT_REQUIRED.
func (r *daemonLink) checkLocal(pd *PD, s *SGE, need localAccess) bool {
	m := (*r.mrs.Load())[s.Token]
	if m == nil {
		m = r.fastMR(s.Token)
	}
	switch {
	case m == nil || m.pd != pd:
		return false
	case s.Addr < m.va || s.Addr-m.va > uint64(len(m.buf)) || uint64(s.Length) > uint64(len(m.buf))-(s.Addr-m.va):
		return false
	case need == localWrite && m.flags&MRFlagAllowLocalWrite == 0:
		return false
	case need == readSink && m.flags&(MRFlagAllowLocalWrite|MRFlagRDMAReadSink) == 0:
		return false
	}
	return true
}

func (r *daemonLink) addMR(m *MR) {
	r.mu.Lock()
	old := *r.mrs.Load()
	next := make(map[uint32]*MR, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[m.tokens.Local] = m
	r.mrs.Store(&next)
	r.mu.Unlock()
}

func without(p *atomic.Pointer[map[uint32]*MR], m *MR) {
	old := *p.Load()
	next := make(map[uint32]*MR, len(old))
	for k, v := range old {
		if v != m {
			next[k] = v
		}
	}
	p.Store(&next)
}

func (r *daemonLink) removeMR(m *MR) {
	r.mu.Lock()
	without(&r.mrs, m)
	if m.fast != nil {
		without(&r.fast, m)
	}
	r.mu.Unlock()
}

// close ends the session: the daemon frees everything the client had
// (connections disconnected, QPs flushed) when the socket closes. The
// adapter's own maps hold nothing of a daemon-backed adapter's.
func (r *daemonLink) close(map[*CQ]struct{}, map[*PD]struct{}) {
	r.mu.Lock()
	cqs := r.cqs
	srqs := r.srqs
	r.srqs = map[uint32]*daemonSRQ{}
	conns, lns := r.connectors, r.listeners
	r.cqs, r.connectors, r.listeners = map[uint32]*daemonCQ{}, map[uint32]*daemonConnector{}, map[uint32]*daemonListener{}
	r.mu.Unlock()
	for _, c := range conns {
		c.disconnectedAt.Store(true)
		c.x.finishRemote()
	}
	for _, l := range lns {
		l.x.finishRemote()
	}
	// NDKPI.md §8: adapter close returns only after the connect and
	// disconnect callbacks running now have returned.
	for _, c := range conns {
		<-c.x.done
	}
	for _, l := range lns {
		<-l.x.done
	}
	r.conn.Close()
	r.stopEvents()
	for _, c := range cqs {
		c.stop()
	}
	for _, s := range srqs {
		if !s.closedAt.Swap(true) {
			close(s.stop)
			<-s.stopped
		}
	}
}

func (r *daemonLink) localAddress() netip.Addr { return r.addr }

func (r *daemonLink) mac() net.HardwareAddr { return r.hw }

func (r *daemonLink) pathMTU() int { return r.pmtu }

func (r *daemonLink) stats() []EngineStats {
	s, _ := r.counters()
	return s
}

func (r *daemonLink) cmStats() CMStats {
	_, c := r.counters()
	return c
}

// counters asks the daemon for its engines' and CM's counters.
func (r *daemonLink) counters() ([]EngineStats, CMStats) {
	var es []EngineStats
	var cs CMStats
	m, err := tell(r, "stats", &proto.Stats{})
	if err != nil {
		return []EngineStats{}, cs
	}
	_ = json.Unmarshal(m.Raw, &es)
	_ = json.Unmarshal(m.Raw2, &cs)
	if es == nil {
		es = []EngineStats{}
	}
	return es, cs
}
