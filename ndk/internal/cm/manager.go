package cm

import (
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// Private-data limits of the NDK connector calls (NDKPI.md §9: REQ 92
// bytes less rdma_cm's 36-byte header, REP 196, REJ 148).
const (
	MaxCallerData = 92 - rocev2.CMAHeaderLen
	MaxCalleeData = 196
	MaxRejectData = 148
)

// Ephemeral port range for port 0 (NDKPI.md §3 NdkCreateSharedEndpoint).
const (
	EphemeralFirst = 49152
	EphemeralLast  = 65535
)

// Params are the protocol constants a Manager puts in its MADs and uses for
// its timers. DefaultParams gives what Linux's rdma_cm sends over RoCE.
type Params struct {
	// CMResponseTimeout is both CM response timeouts of a REQ (5 bits:
	// 4.096 µs × 2^t). rdma_cm: CMA_CM_RESPONSE_TIMEOUT 20.
	CMResponseTimeout uint8
	// MaxCMRetries is how often a REQ, REP or DREQ is resent before giving
	// up (4 bits). rdma_cm: CMA_MAX_CM_RETRIES 15.
	MaxCMRetries uint8
	// PacketLifeTime is the path's packet lifetime exponent. rdma_cm over
	// RoCE: CMA_IBOE_PACKET_LIFETIME, 16 in Linux 6.12 (Debian 13's
	// REQs carry LocalAckTimeout 17), still 18 in Debian 12's 6.1 (its
	// REQs carry 19). A passive side takes the peer's value from the REQ.
	PacketLifeTime uint8
	// AckDelay is this CA's ACK delay exponent: REP TargetAckDelay, and an
	// input of the REQ's LocalAckTimeout. rxe reports 15.
	AckDelay uint8
	// RetryCount and RNRRetry go into REQ (RetryCount, RNRRetryCount) and
	// REP (RNRRetryCount). rdma_cm applications (rping, perftest) ask 7/7.
	RetryCount, RNRRetry uint8
	// MRAServiceTimeout is the service timeout of the MRA sent when a REQ
	// is repeated while the consumer has not yet accepted (rdma_cm:
	// CMA_CM_MRA_SETTING, 24, about 68 s).
	MRAServiceTimeout uint8
	// ListenBacklog bounds a listener's half-open connections: connect
	// requests the consumer has neither accepted nor rejected, and
	// accepted ones whose RTU (or first packet) has not arrived. More are
	// refused with a stateless REJ, so a peer that sends REQs and never
	// completes them (a SYN flood) holds at most this many connections,
	// and the QPs a consumer that accepts everything gave them, per
	// listener, until the REP retries give up.
	ListenBacklog int
	// TimeWait is how long a finished connection keeps answering
	// duplicates (DREQ with DREP, REQ with a stale-connection REJ). 0 means
	// Linux's: the ACK timeout of the path, converted as cm.c does.
	TimeWait time.Duration
	// MaxTimeWait bounds the connections in time-wait, of every listener
	// and connector together (0 means 4,096). A connection ending beyond
	// it evicts the oldest one in time-wait (Stats.TimeWaitEvictions):
	// a peer answering every REP with a REJ ends connections at the rate
	// it may send REQs, 10,000 a second, each held for the time-wait (up
	// to 16 s), outside the listen backlog's bound.
	MaxTimeWait int
	// TrafficClass is the IP TOS byte (DSCP and ECN) of the connections
	// this CM makes: a REQ's primary path carries it, as rdma_cm's
	// carries its id's TOS (cma.c: path_rec->traffic_class = tos), so
	// that a Linux passive side, which builds its QP's address from the
	// REQ's path, answers with the same DSCP and ECN.
	TrafficClass uint8
}

// defaultMaxTimeWait is MaxTimeWait's default: a server ending 256
// connections a second keeps each for a 16 s time-wait; about 1 KiB each.
const defaultMaxTimeWait = 4096

// DefaultParams returns the values Linux's rdma_cm uses over RoCE.
func DefaultParams() Params {
	return Params{
		CMResponseTimeout: 20,
		MaxCMRetries:      15,
		PacketLifeTime:    16,
		AckDelay:          15,
		RetryCount:        7,
		RNRRetry:          7,
		MRAServiceTimeout: 24,
		ListenBacklog:     128,
	}
}

func (p *Params) validate() error {
	switch {
	case p.CMResponseTimeout > 31, p.PacketLifeTime > 30, p.AckDelay > 31, p.MRAServiceTimeout > 31:
		return fmt.Errorf("timeout exponents are 5 bits: %+v", *p)
	case p.MaxCMRetries > 15:
		return fmt.Errorf("MaxCMRetries %d exceeds 4 bits", p.MaxCMRetries)
	case p.RetryCount > 7, p.RNRRetry > 7:
		return fmt.Errorf("retry counts are 3 bits: %d, %d", p.RetryCount, p.RNRRetry)
	case p.ListenBacklog <= 0:
		return fmt.Errorf("ListenBacklog %d must be positive", p.ListenBacklog)
	case p.TimeWait < 0:
		return fmt.Errorf("negative TimeWait %v", p.TimeWait)
	case p.MaxTimeWait < 0:
		return fmt.Errorf("negative MaxTimeWait %d", p.MaxTimeWait)
	}
	return nil
}

// Config configures a Manager.
type Config struct {
	// Transport carries MADs to peers. Required.
	Transport Transport
	// Clock drives retransmissions; nil means SystemClock.
	Clock Clock
	// CAGUID is the adapter's GUID in REQ and REP: the EUI-64 of its MAC
	// (rocev2.EUI64), as Linux RoCE drivers derive it. Required.
	CAGUID uint64
	// Params are the protocol constants; the zero value means DefaultParams.
	Params Params
	// IsLocalAddr reports whether an address belongs to this adapter;
	// Listen, Connect and shared endpoints on others fail with
	// INVALID_ADDRESS. nil accepts any unicast address.
	IsLocalAddr func(netip.Addr) bool
	// Seed makes communication IDs, transaction IDs and port choices
	// reproducible in tests; 0 seeds from crypto/rand.
	Seed uint64
}

// Stats counts MADs by attribute and what happened to them.
type Stats struct {
	Sent, Received map[rocev2.AttributeID]uint64
	// Retransmits counts REQ, REP and DREQ resent after a timeout.
	Retransmits uint64
	// Duplicates counts received MADs answered from state (not executed).
	Duplicates uint64
	// Unmatched counts MADs for no known connection, dropped.
	Unmatched uint64
	// Malformed counts MADs that did not decode.
	Malformed uint64
	// Connections is how many connections the manager holds state for
	// now, in any state up to the end of time-wait; HalfOpen how many of
	// them are passive and not yet established (the REQs a listener's
	// backlog bounds); TimeWait how many are in time-wait
	// (Params.MaxTimeWait bounds them).
	Connections, HalfOpen, TimeWait int
	// TimeWaitEvictions counts connections whose time-wait ended early
	// because a newer one would have exceeded Params.MaxTimeWait;
	// BacklogRefusals the REQs refused (a stateless REJ) because their
	// listener's backlog was full.
	TimeWaitEvictions, BacklogRefusals uint64
}

// Manager is the InfiniBand Communication Manager of one adapter: it runs
// the connection state machines of IBTA chapter 12 for every Connector and
// Listener of the adapter, as Linux's ib_cm and rdma_cm do for RoCE.
type Manager struct {
	tr     Transport
	clock  Clock
	guid   uint64
	p      Params
	isAddr func(netip.Addr) bool

	mu        sync.Mutex
	closed    bool
	rng       *rand.Rand
	hiTID     uint32
	idOperand uint32
	idNext    uint32
	conns     map[uint32]*Connector    // by local communication ID
	remoteIDs map[remoteKey]*Connector // by (peer GUID, peer comm ID): duplicate REQs
	remoteQPs map[remoteKey]*Connector // by (peer GUID, peer QPN): stale connections
	byQPN     map[uint32]*Connector    // by local QPN: implicit RTU
	listeners map[uint16][]*Listener
	endpoints map[uint16][]*endpoint // by port
	timers    deadlines
	armed     Timer
	armedAt   time.Time
	stats     Stats
	effects   []effect
	// Connections in time-wait, oldest first (Connector.twPrev, twNext).
	twOldest, twNewest *Connector
	timeWaits          int
	sidr               sidrState // UD service resolution (sidr.go)
}

type remoteKey struct {
	guid uint64
	id   uint32
}

// New returns a Manager.
func New(cfg Config) (*Manager, error) {
	if cfg.Transport == nil {
		return nil, ndkpi.Errorf(ndkpi.StatusInvalidParameter, "new manager", nil, "no Transport")
	}
	if cfg.CAGUID == 0 {
		return nil, ndkpi.Errorf(ndkpi.StatusInvalidParameter, "new manager", nil, "CAGUID is 0; use rocev2.EUI64 of the adapter's MAC")
	}
	p := cfg.Params
	if p == (Params{}) {
		p = DefaultParams()
	}
	if err := p.validate(); err != nil {
		return nil, ndkpi.Errorf(ndkpi.StatusInvalidParameter, "new manager", err, "bad Params")
	}
	if p.MaxTimeWait == 0 {
		p.MaxTimeWait = defaultMaxTimeWait
	}
	seed := cfg.Seed
	if seed == 0 {
		var b [8]byte
		if _, err := crand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("cm: new manager: seed: %w", err)
		}
		seed = binary.LittleEndian.Uint64(b[:]) | 1
	}
	m := &Manager{
		tr:        cfg.Transport,
		clock:     cfg.Clock,
		guid:      cfg.CAGUID,
		p:         p,
		isAddr:    cfg.IsLocalAddr,
		rng:       rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		conns:     map[uint32]*Connector{},
		remoteIDs: map[remoteKey]*Connector{},
		remoteQPs: map[remoteKey]*Connector{},
		byQPN:     map[uint32]*Connector{},
		listeners: map[uint16][]*Listener{},
		endpoints: map[uint16][]*endpoint{},
		stats:     Stats{Sent: map[rocev2.AttributeID]uint64{}, Received: map[rocev2.AttributeID]uint64{}},
	}
	if m.clock == nil {
		m.clock = SystemClock{}
	}
	// Linux forms TIDs from the MAD agent's hi_tid and the local comm ID,
	// and comm IDs as a cyclic counter XOR a random operand (cm.c
	// cm_form_tid, cm_alloc_id_priv).
	m.hiTID = m.rng.Uint32() | 1
	m.idOperand = m.rng.Uint32()
	return m, nil
}

// Params returns the protocol constants in use.
func (m *Manager) Params() Params { return m.p }

// Stats returns a snapshot of the counters.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.stats
	s.Connections, s.TimeWait = len(m.conns), m.timeWaits
	for _, ls := range m.listeners {
		for _, l := range ls {
			s.HalfOpen += l.pending
		}
	}
	s.Sent, s.Received = map[rocev2.AttributeID]uint64{}, map[rocev2.AttributeID]uint64{}
	for k, v := range m.stats.Sent {
		s.Sent[k] = v
	}
	for k, v := range m.stats.Received {
		s.Received[k] = v
	}
	return s
}

// Close stops the Manager: its timer is cancelled, later MADs are ignored,
// and requests still pending complete with CANCELLED. Connectors and
// listeners should be closed first; Close does not send anything.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	if m.armed != nil {
		m.armed.Stop()
		m.armed = nil
	}
	for _, c := range m.conns {
		c.cancelTimer()
		c.failPending(m, ndkpi.ErrCancelled)
	}
	m.timers = deadlines{}
	m.unlockAndRun()
}

// ---- effects: everything that leaves the lock ----

type effectKind uint8

const (
	effSend effectKind = iota
	effCall
	effQPError
	effDrained
	effFunc
)

// effect is work decided under the lock and done after it is released, so
// that transports, QPs and consumer callbacks may call back into the
// Manager: MADs to send, callbacks to make, QP transitions to start.
type effect struct {
	kind   effectKind
	path   PathInfo
	mad    *[rocev2.MADLen]byte
	owner  *lifetime
	always bool // run even if the owner was closed (pending completions)
	fn     func()
	qp     QP
}

// unlockAndRun releases the lock and performs the effects queued under it.
func (m *Manager) unlockAndRun() {
	effs := m.effects
	m.effects = nil
	m.mu.Unlock()
	m.run(effs)
}

func (m *Manager) run(effs []effect) {
	for i := range effs {
		e := &effs[i]
		switch e.kind {
		case effSend:
			// A send error is a lost datagram; retransmission covers it.
			_ = m.tr.SendMAD(e.path, e.mad)
		case effCall:
			m.call(e.owner, e.always, e.fn)
		case effQPError:
			e.qp.ToError()
		case effDrained:
			e.qp.Drained(e.fn)
		case effFunc:
			e.fn()
		}
	}
}

// call runs a consumer callback owned by a connector or listener, unless
// the owner was closed and the callback is not a pending completion. It
// counts running callbacks so that a close completes only after they
// returned (NDKPI.md §8 Object lifetime).
func (m *Manager) call(lt *lifetime, always bool, fn func()) {
	m.mu.Lock()
	if lt.closed && !always {
		m.mu.Unlock()
		return
	}
	lt.inflight++
	m.mu.Unlock()
	fn()
	m.mu.Lock()
	lt.inflight--
	done := lt.finishable()
	m.mu.Unlock()
	if done != nil {
		done()
	}
}

func (m *Manager) queueCall(lt *lifetime, always bool, fn func()) {
	m.effects = append(m.effects, effect{kind: effCall, owner: lt, always: always, fn: fn})
}

func (m *Manager) queueFunc(fn func()) {
	m.effects = append(m.effects, effect{kind: effFunc, fn: fn})
}

// send encodes msg with transaction ID tid and queues it along path. It
// returns the encoded MAD for retransmission.
func (m *Manager) send(path PathInfo, tid uint64, msg rocev2.CMMessage) *[rocev2.MADLen]byte {
	var buf [rocev2.MADLen]byte
	mad := rocev2.NewCMMAD(tid, msg)
	if err := mad.Encode(buf[:]); err != nil {
		// Every message is built here from in-range fields; an encode error
		// is a bug, and dropping the MAD is what the peer would see anyway.
		return &buf
	}
	m.sendRaw(path, &buf)
	return &buf
}

func (m *Manager) sendRaw(path PathInfo, mad *[rocev2.MADLen]byte) {
	cp := *mad
	m.stats.Sent[rocev2.AttributeID(binary.BigEndian.Uint16(cp[16:]))]++
	m.effects = append(m.effects, effect{kind: effSend, path: path, mad: &cp})
}

// ---- identifiers ----

func (m *Manager) allocLocalID() uint32 {
	for {
		m.idNext++
		id := m.idNext ^ m.idOperand
		if id == 0 {
			continue
		}
		if _, used := m.conns[id]; !used {
			return id
		}
	}
}

// tidFor forms a transaction ID as cm.c cm_form_tid does on a
// little-endian host: hi_tid in the upper half, the local comm ID's
// big-endian bytes read as a native integer in the lower half (the
// captures show TID low word = byte-swapped LocalCommID).
func (m *Manager) tidFor(localID uint32) uint64 {
	return uint64(m.hiTID)<<32 | uint64(bits.ReverseBytes32(localID))
}

// ---- timers ----

// arm (re)starts c's single timer to fire d from now.
func (m *Manager) arm(c *Connector, d time.Duration) {
	c.timerGen++
	c.timerSet = true
	m.timers.set(c, m.clock.Now().Add(d))
	m.schedule()
}

// schedule makes the clock timer fire at the earliest live deadline.
func (m *Manager) schedule() {
	for {
		e, ok := m.timers.peek()
		if !ok {
			if m.armed != nil {
				m.armed.Stop()
				m.armed = nil
			}
			return
		}
		if e.gen != e.conn.timerGen || !e.conn.timerSet {
			m.timers.pop() // cancelled or rearmed: drop it now
			continue
		}
		if m.armed != nil && !m.armedAt.After(e.at) {
			return
		}
		if m.armed != nil {
			m.armed.Stop()
		}
		m.armedAt = e.at
		m.armed = m.clock.AfterFunc(e.at.Sub(m.clock.Now()), m.onClock)
		return
	}
}

func (m *Manager) onClock() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.armed = nil
	now := m.clock.Now()
	for {
		e, ok := m.timers.peek()
		if !ok || e.at.After(now) {
			break
		}
		m.timers.pop()
		c := e.conn
		if e.gen != c.timerGen || !c.timerSet {
			continue
		}
		c.timerSet = false
		c.onTimeout(m)
	}
	m.schedule()
	m.unlockAndRun()
}

// ---- inbound ----

// HandleMAD processes one MAD received on QP1. src is the path back to the
// sender (CheckGSI returns it), srcQP the DETH source QP. The engine calls
// it for every valid UD SEND_ONLY to QP1 with the GSI Q_Key; mad is not
// kept after HandleMAD returns.
func (m *Manager) HandleMAD(src PathInfo, srcQP uint32, mad []byte) {
	d, err := rocev2.DecodeMAD(mad)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	if err != nil || d.Header.Method != rocev2.MethodSend {
		m.stats.Malformed++
		m.mu.Unlock()
		return
	}
	m.stats.Received[d.Header.AttributeID]++
	src.PeerQP = srcQP
	tid := d.Header.TransactionID
	switch msg := d.Message.(type) {
	case *rocev2.CMReq:
		m.handleREQ(src, tid, msg)
	case *rocev2.CMRep:
		m.handleREP(src, tid, msg)
	case *rocev2.CMRtu:
		m.handleRTU(msg)
	case *rocev2.CMRej:
		m.handleREJ(msg)
	case *rocev2.CMMra:
		m.handleMRA(msg)
	case *rocev2.CMDreq:
		m.handleDREQ(src, tid, msg)
	case *rocev2.CMDrep:
		m.handleDREP(msg)
	case *rocev2.CMSIDRReq:
		m.handleSIDRREQ(src, tid, msg)
	case *rocev2.CMSIDRRep:
		m.handleSIDRREP(msg)
	default:
		m.stats.Unmatched++
	}
	m.unlockAndRun()
}

// CommEstablished tells the CM that the QP with local number qpn received
// its first packet. A passive connection still waiting for RTU then counts
// as established, as IBTA allows and Linux does on IB_EVENT_COMM_EST
// (cm.c ib_cm_notify): the active side's data proves its RTU was sent.
func (m *Manager) CommEstablished(qpn uint32) {
	m.mu.Lock()
	if c := m.byQPN[qpn]; c != nil && c.state == stRepSent {
		c.establish(m)
	}
	m.unlockAndRun()
}

// rejectStateless answers a MAD that has no connection with a REJ built
// from the MAD's own IDs and transaction ID (cm.c cm_issue_rej).
func (m *Manager) rejectStateless(path PathInfo, tid uint64, theirLocalID, ourLocalID uint32, rejected rocev2.CMMessageKind, reason rocev2.RejectReason) {
	rej := &rocev2.CMRej{
		LocalCommID:     ourLocalID,
		RemoteCommID:    theirLocalID,
		MessageRejected: rejected,
		Reason:          reason,
	}
	m.send(path, tid, rej)
}

func (m *Manager) register(c *Connector) {
	m.conns[c.localID] = c
}

func (m *Manager) registerRemote(c *Connector) {
	m.remoteIDs[remoteKey{c.remoteGUID, c.remoteID}] = c
	m.remoteQPs[remoteKey{c.remoteGUID, c.remoteQPN}] = c
}

func (m *Manager) unregister(c *Connector) {
	if m.conns[c.localID] == c {
		delete(m.conns, c.localID)
	}
	if k := (remoteKey{c.remoteGUID, c.remoteID}); m.remoteIDs[k] == c {
		delete(m.remoteIDs, k)
	}
	if k := (remoteKey{c.remoteGUID, c.remoteQPN}); m.remoteQPs[k] == c {
		delete(m.remoteQPs, k)
	}
	if c.qp != nil && m.byQPN[c.qpn] == c {
		delete(m.byQPN, c.qpn)
	}
}

func (m *Manager) timeWait(c *Connector) time.Duration {
	if m.p.TimeWait > 0 {
		return m.p.TimeWait
	}
	// The path's timeout, which a passive connection takes from the
	// peer's REQ, capped at 16 times our own: a REQ's 5-bit field asks up
	// to 2.4 hours, and every flood REQ that times out would hold its
	// state that long.
	return imsOf(min(c.avTimeout, ackTimeout(m.p.AckDelay, m.p.PacketLifeTime)+4))
}

func guidARI(guid uint64) (ari [72]byte) {
	binary.BigEndian.PutUint64(ari[:], guid)
	return ari
}
