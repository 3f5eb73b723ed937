// Package rsocket speaks librdmacm's rsockets stream protocol (rdma-core
// librdmacm/rsocket.c, SOCK_STREAM) over a verbs endpoint, so that ndkxdp's
// tools talk to the rsocket peers Linux runs: rstream, riostream's stream
// part, and any program preloaded with librspreload.
//
// The protocol, as rsocket.c puts it on the wire:
//
//   - The connection is an RC connection through rdma_cm (port space TCP)
//     whose REQ and REP carry struct rs_conn_data (40 bytes, big-endian):
//     version 1, flags (RS_CONN_FLAG_IOMAP; RS_CONN_FLAG_NET if the host is
//     big-endian), the receive credits (the receive queue's depth), the
//     iomap size, where the peer may write its buffer offers (target_sgl:
//     address, key, two entries) and the first half of the sender's
//     receive buffer (data_buf).
//   - Data goes by RDMA WRITE with immediate into the receive buffer the
//     peer offered; the immediate is RS_OP_DATA (0) << 29 | length. Each
//     consumes one of the peer's receives (posted without SGEs).
//   - The receiver gives back credits and buffer with RS_OP_SGL (4) << 29 |
//     (messages read + queue depth): a 16-byte WRITE with immediate of a new
//     offer {address, key, length} into the sender's target_sgl (entries
//     alternating 1, 0, 1, ...) when half the buffer is free again, else a
//     zero-length one. Offers are in the receiver's byte order unless the
//     flags differ (RS_OPT_SWAP_SGL); this side declares little-endian.
//   - Control messages are zero-length WRITEs with immediate RS_OP_CTRL (7)
//     << 29 | RS_CTRL_DISCONNECT (0) or RS_CTRL_SHUTDOWN (2); a keepalive is
//     a zero-length RDMA WRITE (no immediate) naming RS_CTRL_KEEPALIVE
//     only in its work request. At most four control messages are in
//     flight (RS_QP_CTRL_SIZE).
//
// A Conn is used by one goroutine at a time, as rstream uses its socket.
package rsocket

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// rsocket.c's constants.
const (
	version    = 1
	flagNet    = 1 << 0 // RS_CONN_FLAG_NET
	flagIOMap  = 1 << 1 // RS_CONN_FLAG_IOMAP
	connLen    = 40     // sizeof(struct rs_conn_data)
	sgeLen     = 16     // sizeof(struct rs_sge)
	sglSize    = 2      // RS_SGL_SIZE
	ctrlSlots  = 4      // RS_QP_CTRL_SIZE
	sndLowat   = 2048   // RS_SNDLOWAT
	olapStart  = 2048   // RS_OLAP_START_SIZE
	maxXfer    = 65536  // RS_MAX_TRANSFER
	minQueue   = 16     // RS_QP_MIN_SIZE
	maxQueue   = 0xFFFE // RS_QP_MAX_SIZE
	dataMask   = 0x1FFFFFFF
	opData     = 0 // RS_OP_DATA
	opWrite    = 2 // RS_OP_WRITE, never on the wire
	opSGL      = 4 // RS_OP_SGL
	opIOMapSGL = 6 // RS_OP_IOMAP_SGL
	opCtrl     = 7 // RS_OP_CTRL

	ctrlDisconnect = 0 // RS_CTRL_DISCONNECT
	ctrlKeepalive  = 1 // RS_CTRL_KEEPALIVE
	ctrlShutdown   = 2 // RS_CTRL_SHUTDOWN
)

// Defaults, as rsocket.c's without /etc/rdma/rsocket: a 128 KiB receive
// and send buffer, 384-entry queues.
const (
	DefaultBuffer = 1 << 17
	DefaultQueue  = 384
)

func msg(op, data uint32) uint32 { return op<<29 | data&dataMask }

// Config sizes one side of a connection.
type Config struct {
	// RcvBuf and SndBuf are the receive and send buffers in bytes
	// (rsocket's rbuf_size and sbuf_size: what SO_RCVBUF and SO_SNDBUF
	// set, doubled); 0 is DefaultBuffer. The peer is offered half the
	// receive buffer at a time.
	RcvBuf, SndBuf int
	// Queue is the send and receive queue depth (rsocket's sq_size and
	// rq_size, 16 to 65534); 0 is DefaultQueue. The receive queue's depth
	// is the credits the peer gets.
	Queue int
	// IOMap is how many of the peer's direct-write mappings this side
	// takes (RDMA_IOMAPSIZE; rsocket rounds it as its scale does): the
	// peer's MapIO offers land here, and IOWrite writes into them.
	IOMap int
	// Keepalive, if positive, sends a keepalive that often while the
	// connection is used (SO_KEEPALIVE with TCP_KEEPIDLE).
	Keepalive time.Duration
	// Backoff is how a blocked call waits (verbs.Backoff).
	Backoff verbs.Backoff
}

func (c *Config) check() error {
	if c.RcvBuf == 0 {
		c.RcvBuf = DefaultBuffer
	}
	if c.SndBuf == 0 {
		c.SndBuf = DefaultBuffer
	}
	if c.Queue == 0 {
		c.Queue = DefaultQueue
	}
	switch {
	case c.RcvBuf < 2*sndLowat || c.RcvBuf&1 != 0 || c.RcvBuf > 1<<30:
		return fmt.Errorf("rsocket: receive buffer %d: an even size from %d to 1 GiB: %w", c.RcvBuf, 2*sndLowat, verbs.ErrInvalid)
	case c.SndBuf < 2*sndLowat || c.SndBuf > 1<<30:
		return fmt.Errorf("rsocket: send buffer %d: from %d to 1 GiB: %w", c.SndBuf, 2*sndLowat, verbs.ErrInvalid)
	case c.Queue < minQueue || c.Queue > maxQueue:
		return fmt.Errorf("rsocket: queue depth %d: from %d to %d: %w", c.Queue, minQueue, maxQueue, verbs.ErrInvalid)
	case c.IOMap < 0 || c.IOMap > 0x7F00:
		return fmt.Errorf("rsocket: iomap size %d: from 0 to %d: %w", c.IOMap, 0x7F00, verbs.ErrInvalid)
	}
	c.IOMap = scaleToValue(valueToScale(c.IOMap))
	return nil
}

// valueToScale and scaleToValue are rsocket.c's rs_value_to_scale and
// rs_scale_to_value for 8 bits: up to 128 as is, beyond in units of 256.
func valueToScale(v int) int {
	if v <= 1<<7 {
		return v
	}
	return 1<<7 | v>>8
}

func scaleToValue(v int) int {
	if v <= 1<<7 {
		return v
	}
	return (v &^ (1 << 7)) << 8
}

// Endpoint is what a Conn runs on: a verbs endpoint with WRITE with
// immediate and the peer's private data.
type Endpoint interface {
	verbs.Endpoint
	verbs.Immediate
	verbs.PeerData
}

// state bits, rsocket.c's rs_state for a connected socket.
const (
	connected = 1 << iota
	readable
	writable
)

// sge is struct rs_sge.
type sge struct {
	addr        uint64
	key, length uint32
}

// iomapLen is sizeof(struct rs_iomap): the offset, then an rs_sge.
const iomapLen = 8 + sgeLen

// iomap is struct rs_iomap: a window of the peer's memory that IOWrite
// writes into, named by an offset of the peer's choosing.
type iomap struct {
	offset uint64
	sge
}

// mapping is one of this side's MapIO windows in a slot of the peer's
// iomap table.
type mapping struct {
	used, pending, inflight bool
	iomap
}

// sent is one signaled send awaiting its completion (RC completes them in
// order): what it gives back.
type sent struct {
	op, data uint32
}

// ErrReset is a write on a connection the peer closed (ECONNRESET).
var ErrReset = errors.New("rsocket: connection reset by peer")

// Conn is one rsocket stream connection.
type Conn struct {
	ep  Endpoint
	cfg Config

	state int
	err   error // why the connection failed, once it did

	// Send side.
	sbuf      verbs.Region // SndBuf bytes, then ctrlSlots offers
	sOff      int          // where the next transfer is copied
	sbufAvail int
	sqeAvail  int
	sseqNo    uint16
	sseqComp  uint16
	targetReg verbs.Region // the peer's offers land here
	target    [sglSize]sge
	targetSGE int // the offer being filled
	nextOffer int // the entry the peer's next offer lands in
	remoteSGL sge // the peer's target_sgl
	remoteSGE int
	swapSGL   bool // the peer's byte order is big-endian
	ctrlSeq   uint32
	ctrlMax   uint32
	// Direct writes: the peer's windows (read from targetReg after the
	// offers), this side's windows in the peer's table, and where their
	// messages are built.
	peerMaps  []iomap
	remoteMap sge // the peer's iomap table: address, key, entries
	maps      []mapping
	mapMsgs   verbs.Region
	sends     []sent // ring of Queue entries
	sHead     int
	sCount    int

	// Receive side.
	rbuf      verbs.Region
	rbufOff   int // where Read reads next
	rbufFree  int // the next half to offer
	rbufAvail int // bytes read and not yet offered again
	rseqNo    uint16
	rseqComp  uint16
	rmsg      []uint32 // ring of Queue+1 unread data messages' lengths
	rHead     int
	rTail     int

	comps         [64]verbs.Completion
	lastKeepalive time.Time
}

// Dial connects to the rsocket listening on port through c.
func Dial(ctx context.Context, c verbs.Connector, port uint16, cfg Config) (*Conn, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	r := &Conn{cfg: cfg}
	pd := make([]byte, connLen)
	ep, err := c.Connect(ctx, port, r.params(pd, func(Endpoint) error { return nil }))
	if err != nil {
		return nil, err
	}
	if err := r.save(r.ep.PeerPrivateData()); err != nil {
		ep.Close()
		return nil, err
	}
	return r, nil
}

// Accept accepts the next connection on l. A REQ that carries no rsocket
// connection data of version 1 is rejected, as rs_accept does.
func Accept(ctx context.Context, l verbs.Listener, cfg Config) (*Conn, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	r := &Conn{cfg: cfg}
	pd := make([]byte, connLen)
	_, err := l.Accept(ctx, r.params(pd, func(ep Endpoint) error { return r.save(ep.PeerPrivateData()) }))
	if err != nil {
		return nil, err
	}
	return r, nil
}

// params are rs_do_connect's and rs_accept's connection parameters: the
// endpoint is set up (rs_create_ep), then checked, and pd filled with this
// side's connection data. Transport retries are IB's limit and RNR NAKs
// are waited out without end (retry_count and rnr_retry_count 7).
func (r *Conn) params(pd []byte, check func(Endpoint) error) verbs.ConnParams {
	return verbs.ConnParams{
		RetryCount: 7, RNRRetryCount: 7, PrivateData: pd, Unordered: true,
		Prepare: func(vep verbs.Endpoint) error {
			ep, ok := vep.(Endpoint)
			if !ok {
				return fmt.Errorf("rsocket: the endpoint has no WRITE with immediate or private data: %w", verbs.ErrInvalid)
			}
			if err := r.setup(ep); err != nil {
				return err
			}
			if err := check(ep); err != nil {
				return err
			}
			r.format(pd)
			return nil
		},
	}
}

// setup registers the buffers and posts the receives (rs_init_bufs,
// rs_create_ep).
func (r *Conn) setup(ep Endpoint) error {
	r.ep = ep
	q := r.cfg.Queue
	reg := func(n int, access verbs.Access) (verbs.Region, error) {
		buf, err := ep.Alloc(n)
		if err != nil {
			return verbs.Region{}, err
		}
		return ep.Register(buf, access)
	}
	var err error
	if r.sbuf, err = reg(r.cfg.SndBuf+ctrlSlots*sgeLen, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("rsocket: send buffer: %w", err)
	}
	if r.targetReg, err = reg(sglSize*sgeLen+r.cfg.IOMap*iomapLen, verbs.AccessRemoteWrite); err != nil {
		return fmt.Errorf("rsocket: target list: %w", err)
	}
	if r.rbuf, err = reg(r.cfg.RcvBuf, verbs.AccessRemoteWrite); err != nil {
		return fmt.Errorf("rsocket: receive buffer: %w", err)
	}
	r.peerMaps = make([]iomap, r.cfg.IOMap)
	r.sends = make([]sent, q)
	r.rmsg = make([]uint32, q+1)
	half := r.cfg.RcvBuf / 2
	r.sbufAvail = r.cfg.SndBuf
	r.rbufFree, r.rbufAvail = half, half
	r.ctrlMax = ctrlSlots
	r.sqeAvail = q - ctrlSlots
	r.rseqComp = uint16(q / 2)
	r.state = connected | readable | writable
	for range q {
		if err := ep.Receive(0, verbs.Segment{Region: r.rbuf}); err != nil {
			return fmt.Errorf("rsocket: post receive: %w", err)
		}
	}
	return nil
}

// format writes this side's rs_conn_data (rs_format_conn_data).
func (r *Conn) format(pd []byte) {
	be := binary.BigEndian
	pd[0] = version
	pd[1] = flagIOMap
	be.PutUint16(pd[2:], uint16(r.cfg.Queue))
	clear(pd[4:7]) // reserved
	pd[7] = byte(valueToScale(r.cfg.IOMap))
	be.PutUint64(pd[8:], r.targetReg.Addr)
	be.PutUint32(pd[16:], r.targetReg.RKey)
	be.PutUint32(pd[20:], sglSize)
	be.PutUint64(pd[24:], r.rbuf.Addr)
	be.PutUint32(pd[32:], r.rbuf.RKey)
	be.PutUint32(pd[36:], uint32(r.cfg.RcvBuf/2))
}

// save takes the peer's rs_conn_data (rs_save_conn_data).
func (r *Conn) save(pd []byte) error {
	if len(pd) < connLen {
		return fmt.Errorf("rsocket: the peer's private data has %d bytes, want %d", len(pd), connLen)
	}
	if pd[0] != version {
		return fmt.Errorf("rsocket: the peer speaks rsocket version %d, want %d", pd[0], version)
	}
	be := binary.BigEndian
	r.remoteSGL = sge{addr: be.Uint64(pd[8:]), key: be.Uint32(pd[16:]), length: be.Uint32(pd[20:])}
	if r.remoteSGL.length == 0 {
		return fmt.Errorf("rsocket: the peer's target list has no entry")
	}
	r.remoteSGE = 1 % int(r.remoteSGL.length)
	r.swapSGL = pd[1]&flagNet != 0
	if pd[1]&flagIOMap != 0 {
		r.remoteMap = sge{addr: r.remoteSGL.addr + uint64(sgeLen)*uint64(r.remoteSGL.length),
			key: r.remoteSGL.key, length: uint32(scaleToValue(int(pd[7])))}
	}
	r.target[0] = sge{addr: be.Uint64(pd[24:]), key: be.Uint32(pd[32:]), length: be.Uint32(pd[36:])}
	r.targetSGE, r.nextOffer = 0, 1
	r.sseqComp = be.Uint16(pd[2:])
	return nil
}

// order is the byte order of the offers this side writes to the peer.
func (r *Conn) order() binary.ByteOrder {
	if r.swapSGL {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

func (r *Conn) push(op, data uint32) {
	r.sends[(r.sHead+r.sCount)%len(r.sends)] = sent{op, data}
	r.sCount++
}

// fail records the first failure and leaves the connection unusable.
func (r *Conn) fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.state = 0
}

// ctrlAvail: a control message may be sent (rs_ctrl_avail).
func (r *Conn) ctrlAvail() bool { return r.ctrlSeq != r.ctrlMax }

// giveCredits: the peer should hear of read messages or free buffer
// (rs_give_credits).
func (r *Conn) giveCredits() bool {
	return (r.rbufAvail >= r.cfg.RcvBuf/2 || int16(r.rseqNo-r.rseqComp) >= 0) &&
		r.ctrlAvail() && r.state&connected != 0
}

// sendCredits grants credits and, when half the buffer is free, offers it
// (rs_send_credits).
func (r *Conn) sendCredits() {
	r.ctrlSeq++
	q := uint32(r.cfg.Queue)
	r.rseqComp = r.rseqNo + uint16(q/2)
	imm := msg(opSGL, uint32(r.rseqNo)+q)
	half := r.cfg.RcvBuf / 2
	var err error
	if r.rbufAvail >= half {
		off := r.cfg.SndBuf + sgeLen*int(r.ctrlSeq&(ctrlSlots-1))
		b, o := r.sbuf.Buf[off:off+sgeLen], r.order()
		o.PutUint64(b, r.rbuf.Addr+uint64(r.rbufFree))
		o.PutUint32(b[8:], r.rbuf.RKey)
		o.PutUint32(b[12:], uint32(half))
		err = r.ep.WriteImm(0, verbs.Segment{Region: r.sbuf, Off: off, Len: sgeLen},
			r.remoteSGL.addr+uint64(r.remoteSGE*sgeLen), r.remoteSGL.key, imm, true)
		r.rbufAvail -= half
		r.rbufFree += half
		if r.rbufFree >= r.cfg.RcvBuf {
			r.rbufFree = 0
		}
		r.remoteSGE = (r.remoteSGE + 1) % int(r.remoteSGL.length)
	} else {
		err = r.ep.WriteImm(0, verbs.Segment{Region: r.sbuf}, 0, 0, imm, true)
	}
	if err != nil {
		r.fail(fmt.Errorf("rsocket: post credits: %w", err))
		return
	}
	r.push(opSGL, 0)
}

func (r *Conn) updateCredits() {
	if r.giveCredits() {
		r.sendCredits()
	}
}

// poll takes the completions there are (rs_poll_cq) and reports whether
// there were any.
func (r *Conn) poll() bool {
	n, err := r.ep.Poll(r.comps[:])
	recvs := 0
	for i := range r.comps[:n] {
		c := &r.comps[i]
		if c.Op == verbs.OpRecvRDMAWithImm || c.Op == verbs.OpReceive {
			if c.Err != nil {
				continue
			}
			recvs++
			r.received(c)
			continue
		}
		if r.sCount == 0 {
			r.fail(fmt.Errorf("rsocket: a completion for no request (%v)", c.Op))
			break
		}
		s := r.sends[r.sHead]
		r.sHead = (r.sHead + 1) % len(r.sends)
		r.sCount--
		switch s.op {
		case opSGL, opCtrl:
			r.ctrlMax++
			if s.op == opCtrl && s.data == ctrlDisconnect {
				r.state = 0
			}
		case opIOMapSGL:
			r.sqeAvail++
			r.maps[s.data].inflight = false
		default:
			r.sqeAvail++
			r.sbufAvail += int(s.data)
		}
		if c.Err != nil && r.state&connected != 0 {
			r.fail(fmt.Errorf("rsocket: %v: %w", c.Op, c.Err))
		}
	}
	switch {
	case errors.Is(err, verbs.ErrDisconnected):
		// The peer's DREQ, with or without its RS_CTRL_DISCONNECT first:
		// what was received can still be read.
		r.state = 0
	case err != nil:
		r.fail(fmt.Errorf("rsocket: poll: %w", err))
	}
	if r.state&connected != 0 {
		for range recvs {
			if err := r.ep.Receive(0, verbs.Segment{Region: r.rbuf}); err != nil {
				r.fail(fmt.Errorf("rsocket: repost receive: %w", err))
				break
			}
		}
	}
	return n > 0
}

// received handles one message of the peer's.
func (r *Conn) received(c *verbs.Completion) {
	m := c.Imm
	switch m >> 29 {
	case opSGL:
		r.sseqComp = uint16(m & dataMask)
		if c.Bytes == sgeLen {
			// The offer landed in the entry after the last one: the
			// completion orders our read after its placement.
			b, k := r.targetReg.Buf[r.nextOffer*sgeLen:], r.nextOffer
			le := binary.LittleEndian
			r.target[k] = sge{addr: le.Uint64(b), key: le.Uint32(b[8:]), length: le.Uint32(b[12:])}
			r.nextOffer = (k + 1) % sglSize
		}
	case opIOMapSGL:
		// The peer wrote a window into entry k of the table: the
		// completion orders our read after its placement.
		if k := int(m & dataMask); k < len(r.peerMaps) {
			b, le := r.targetReg.Buf[sglSize*sgeLen+k*iomapLen:], binary.LittleEndian
			r.peerMaps[k] = iomap{le.Uint64(b), sge{addr: le.Uint64(b[8:]), key: le.Uint32(b[16:]), length: le.Uint32(b[20:])}}
		}
	case opWrite:
		// Never on the wire.
	case opCtrl:
		switch m & dataMask {
		case ctrlDisconnect:
			r.state = 0
		case ctrlShutdown:
			if r.state&writable != 0 {
				r.state &^= readable
			} else {
				r.state = 0
			}
		}
	default:
		if (r.rTail+1)%len(r.rmsg) == r.rHead {
			// More unread messages than the credits given allow.
			r.fail(fmt.Errorf("rsocket: the peer sent beyond its %d credits", r.cfg.Queue))
			return
		}
		r.rmsg[r.rTail] = m & dataMask
		r.rTail = (r.rTail + 1) % len(r.rmsg)
	}
}

// progress waits until done reports true, driving the connection
// (rs_get_comp): credits, completions, keepalives. It returns the
// connection's failure or ctx's end.
func (r *Conn) progress(ctx context.Context, done func() bool) error {
	b := &r.cfg.Backoff
	for {
		r.updateCredits()
		got := r.poll()
		r.updateCredits()
		if done() {
			return nil
		}
		if r.err != nil {
			return r.err
		}
		if got {
			b.Reset()
			continue
		}
		if err := r.idle(ctx, b); err != nil {
			return err
		}
	}
}

// idle waits as b says, sending keepalives when they are due: a wait
// that blocks ends at the next one.
func (r *Conn) idle(ctx context.Context, b *verbs.Backoff) error {
	if r.cfg.Keepalive <= 0 {
		return b.Idle(ctx, r.ep)
	}
	due := r.keepalive()
	kctx, cancel := context.WithDeadline(ctx, due)
	defer cancel()
	err := b.Idle(kctx, r.ep)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil // the keepalive is due
	}
	return err
}

// keepalive sends RS_CTRL_KEEPALIVE once Keepalive passed since the last
// (tcp_svc_send_keepalive: a zero-length RDMA WRITE the peer does not
// see), and returns when the next is due.
func (r *Conn) keepalive() time.Time {
	now := time.Now()
	if r.lastKeepalive.IsZero() {
		r.lastKeepalive = now
	}
	if now.Sub(r.lastKeepalive) >= r.cfg.Keepalive && r.state&connected != 0 && r.ctrlAvail() {
		r.lastKeepalive = now
		r.ctrlSeq++
		if err := r.ep.Write(0, verbs.Segment{Region: r.sbuf}, 0, 0, true); err != nil {
			r.fail(fmt.Errorf("rsocket: post keepalive: %w", err))
		} else {
			r.push(opCtrl, ctrlKeepalive)
		}
	}
	return r.lastKeepalive.Add(r.cfg.Keepalive)
}

// posted records a transfer of n bytes from the send buffer's ring,
// posted as op, until its completion gives them back.
func (r *Conn) posted(op uint32, n int) {
	r.push(op, uint32(n))
	r.sqeAvail--
	r.sbufAvail -= n
	if r.sOff += n; r.sOff == r.cfg.SndBuf {
		r.sOff = 0
	}
}

// awaitSend waits until ready (rs_get_comp with rs_conn_can_send), or
// with wait false drives the connection once. It reports whether ready
// holds, with nil when a try without waiting found no room, else why
// the connection cannot send.
func (r *Conn) awaitSend(ctx context.Context, wait bool, ready func() bool) (bool, error) {
	if ready() {
		return true, nil
	}
	if wait {
		if err := r.progress(ctx, func() bool { return ready() || r.state&writable == 0 }); err != nil {
			return false, err
		}
	} else if r.step(); !ready() && r.state&writable != 0 {
		return false, r.err
	}
	if r.err != nil {
		return false, r.err
	}
	if r.state&writable == 0 {
		return false, ErrReset
	}
	return true, nil
}

// overlap is rsend's transfer size for left bytes: the rest where it
// fits in olen, else olen, which doubles from RS_OLAP_START_SIZE up to
// RS_MAX_TRANSFER, so that the first bytes leave early.
func overlap(olen *int, left int) int {
	if *olen >= left {
		return left
	}
	x := *olen
	if *olen < maxXfer {
		*olen <<= 1
	}
	return x
}

// canSend: a transfer may be posted now (rs_can_send).
func (r *Conn) canSend() bool {
	return r.sqeAvail > 0 && r.sbufAvail >= sndLowat && r.sseqNo != r.sseqComp &&
		r.target[r.targetSGE].length != 0
}

// ErrWouldBlock is a TryWrite or TryRead that could move nothing now
// (EWOULDBLOCK).
var ErrWouldBlock = errors.New("rsocket: operation would block")

// Write sends p whole, blocking while the peer's credits or buffer or the
// send queue are used up (rsend's loop). It returns ErrReset once the
// peer shut the connection down.
func (r *Conn) Write(ctx context.Context, p []byte) (int, error) { return r.write(ctx, p, true) }

// TryWrite sends what of p can be sent without waiting (rsend with
// MSG_DONTWAIT): it returns ErrWouldBlock if that is nothing.
func (r *Conn) TryWrite(p []byte) (int, error) {
	n, err := r.write(context.Background(), p, false)
	if n == 0 && err == nil && len(p) > 0 {
		err = ErrWouldBlock
	}
	return n, err
}

// step drives the connection once without waiting (rs_process_cq with
// nonblock).
func (r *Conn) step() bool {
	r.updateCredits()
	got := r.poll()
	r.updateCredits()
	return got
}

func (r *Conn) write(ctx context.Context, p []byte, wait bool) (int, error) {
	if err := r.sendMaps(ctx, wait); err != nil {
		return 0, err
	}
	if r.state&writable == 0 {
		if r.err != nil {
			return 0, r.err
		}
		return 0, ErrReset
	}
	olen, done := olapStart, 0
	for done < len(p) {
		if ok, err := r.awaitSend(ctx, wait, r.canSend); !ok {
			return done, err
		}
		xfer := overlap(&olen, len(p)-done)
		t := &r.target[r.targetSGE]
		// The send buffer is a ring; a transfer stops at its end rather
		// than take two SGEs.
		xfer = min(xfer, r.sbufAvail, int(t.length), r.cfg.SndBuf-r.sOff)
		copy(r.sbuf.Buf[r.sOff:], p[done:done+xfer])
		addr, key := t.addr, t.key
		t.addr += uint64(xfer)
		t.length -= uint32(xfer)
		if t.length == 0 {
			r.targetSGE = (r.targetSGE + 1) % sglSize
		}
		if err := r.ep.WriteImm(0, verbs.Segment{Region: r.sbuf, Off: r.sOff, Len: xfer}, addr, key, msg(opData, uint32(xfer)), true); err != nil {
			r.fail(fmt.Errorf("rsocket: post data: %w", err))
			return done, r.err
		}
		r.posted(opData, xfer)
		r.sseqNo++
		done += xfer
	}
	return done, nil
}

// Read reads what has arrived into p, waiting for something if nothing
// has (rrecv). It returns io.EOF once the peer shut its side down and
// everything it sent was read.
func (r *Conn) Read(ctx context.Context, p []byte) (int, error) { return r.read(ctx, p, true) }

// TryRead reads what has arrived without waiting (rrecv with
// MSG_DONTWAIT): it returns ErrWouldBlock if nothing has.
func (r *Conn) TryRead(p []byte) (int, error) { return r.read(context.Background(), p, false) }

func (r *Conn) read(ctx context.Context, p []byte, wait bool) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if r.rHead == r.rTail {
		if wait {
			err := r.progress(ctx, func() bool { return r.rHead != r.rTail || r.state&readable == 0 })
			if err != nil {
				return 0, err
			}
		} else if r.step(); r.rHead == r.rTail && r.state&readable != 0 {
			if r.err != nil {
				return 0, r.err
			}
			return 0, ErrWouldBlock
		}
	}
	n := 0
	for n < len(p) && r.rHead != r.rTail {
		size := int(r.rmsg[r.rHead])
		if left := len(p) - n; left < size {
			r.rmsg[r.rHead] -= uint32(left)
			size = left
		} else {
			r.rseqNo++
			r.rHead = (r.rHead + 1) % len(r.rmsg)
		}
		for size > 0 {
			k := min(size, r.cfg.RcvBuf-r.rbufOff)
			copy(p[n:], r.rbuf.Buf[r.rbufOff:r.rbufOff+k])
			n += k
			size -= k
			r.rbufAvail += k
			if r.rbufOff += k; r.rbufOff == r.cfg.RcvBuf {
				r.rbufOff = 0
			}
		}
	}
	if n == 0 {
		if r.err != nil {
			return 0, r.err
		}
		return 0, io.EOF
	}
	// Offer the buffer back as soon as half of it is read, rather than
	// when the queue runs dry (rrecv's way): the sender need not wait
	// for the reader to empty the whole queue first.
	r.updateCredits()
	return n, nil
}

// ReadFull reads exactly len(p) bytes (rrecv with MSG_WAITALL).
func (r *Conn) ReadFull(ctx context.Context, p []byte) error {
	for n := 0; n < len(p); {
		k, err := r.Read(ctx, p[n:])
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		if err != nil {
			return err
		}
		n += k
	}
	return nil
}

// Shutdown ends both directions (rshutdown SHUT_RDWR): RS_CTRL_DISCONNECT
// goes to the peer, then every send is waited for.
func (r *Conn) Shutdown(ctx context.Context) error {
	if r.state&connected == 0 {
		return nil
	}
	r.state &^= readable | writable
	if !r.ctrlAvail() {
		if err := r.progress(ctx, func() bool { return r.ctrlAvail() || r.state&connected == 0 }); err != nil {
			return err
		}
	}
	if r.state&connected != 0 && r.ctrlAvail() {
		r.ctrlSeq++
		if err := r.ep.WriteImm(0, verbs.Segment{Region: r.sbuf}, 0, 0, msg(opCtrl, ctrlDisconnect), true); err != nil {
			r.fail(fmt.Errorf("rsocket: post disconnect: %w", err))
			return r.err
		}
		r.push(opCtrl, ctrlDisconnect)
	}
	return r.progress(ctx, func() bool {
		return int(r.ctrlMax-r.ctrlSeq)+r.sqeAvail == r.cfg.Queue || r.state&connected == 0
	})
}

// Close shuts the connection down if it is up, then disconnects and
// releases the endpoint (rclose).
func (r *Conn) Close() error {
	if r.state&connected != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = r.Shutdown(ctx)
		cancel()
	}
	return r.ep.Close()
}

// ErrNoMapping is an IOWrite to an offset no window of the peer's covers.
var ErrNoMapping = errors.New("rsocket: no mapping of the peer's covers the offset")

// AllocIO returns n bytes registered for the peer's direct writes, for
// MapIO.
func (r *Conn) AllocIO(n int) (verbs.Region, error) {
	buf, err := r.ep.Alloc(n)
	if err != nil {
		return verbs.Region{}, err
	}
	return r.ep.Register(buf, verbs.AccessRemoteWrite)
}

// MapIO offers the peer window (from AllocIO, or a part of it: its Buf
// from the region's start) for direct writes at offset (riomap with
// PROT_WRITE and an offset): it takes a free entry of the peer's table
// and goes to the peer with the next Write or IOWrite.
func (r *Conn) MapIO(window verbs.Region, offset uint64) error {
	if r.maps == nil {
		r.maps = make([]mapping, r.remoteMap.length)
	}
	for k := range r.maps {
		if m := &r.maps[k]; !m.used {
			*m = mapping{used: true, pending: true, inflight: m.inflight,
				iomap: iomap{offset, sge{addr: window.Addr, key: window.RKey, length: uint32(len(window.Buf))}}}
			return nil
		}
	}
	return fmt.Errorf("rsocket: the peer takes %d mappings, all in use (ENOMEM)", r.remoteMap.length)
}

// UnmapIO withdraws the window MapIO offered at window's address
// (riounmap: the peer is not told).
func (r *Conn) UnmapIO(window verbs.Region) error {
	for k := range r.maps {
		if m := &r.maps[k]; m.used && m.addr == window.Addr && m.length == uint32(len(window.Buf)) {
			m.used, m.pending = false, false
			return nil
		}
	}
	return fmt.Errorf("rsocket: no mapping of %d bytes at %#x: %w", len(window.Buf), window.Addr, verbs.ErrInvalid)
}

// sendMaps sends the windows not yet offered (rs_send_iomaps): each a
// WRITE with immediate RS_OP_IOMAP_SGL | index of its rs_iomap into the
// peer's table, which takes a credit as data does.
func (r *Conn) sendMaps(ctx context.Context, wait bool) error {
	for k := range r.maps {
		m := &r.maps[k]
		if !m.pending {
			continue
		}
		if ok, err := r.awaitSend(ctx, wait, func() bool { return r.canSend() && !m.inflight }); !ok {
			return err
		}
		if r.mapMsgs.Buf == nil {
			var err error
			if r.mapMsgs, err = r.AllocIO(len(r.maps) * iomapLen); err != nil {
				return err
			}
		}
		b, o := r.mapMsgs.Buf[k*iomapLen:], r.order()
		o.PutUint64(b, m.offset)
		o.PutUint64(b[8:], m.addr)
		o.PutUint32(b[16:], m.key)
		o.PutUint32(b[20:], m.length)
		if err := r.ep.WriteImm(0, verbs.Segment{Region: r.mapMsgs, Off: k * iomapLen, Len: iomapLen},
			r.remoteMap.addr+uint64(k*iomapLen), r.remoteMap.key, msg(opIOMapSGL, uint32(k)), true); err != nil {
			r.fail(fmt.Errorf("rsocket: post iomap: %w", err))
			return r.err
		}
		r.push(opIOMapSGL, uint32(k))
		m.pending, m.inflight = false, true
		r.sseqNo++
		r.sqeAvail--
	}
	return nil
}

// IOWrite writes p into the peer's window that covers offset and on
// (riowrite): RDMA WRITEs without immediate, which the peer learns of
// only by looking at its memory. It stops at the end of the windows
// that cover it, and returns ErrNoMapping if none covers offset.
func (r *Conn) IOWrite(ctx context.Context, p []byte, offset uint64) (int, error) {
	if err := r.sendMaps(ctx, true); err != nil {
		return 0, err
	}
	olen, done := olapStart, 0
	var m *iomap
	for done < len(p) {
		off := offset + uint64(done)
		if m == nil || off >= m.offset+uint64(m.length) {
			if m = r.findMap(off); m == nil {
				if done == 0 {
					return 0, ErrNoMapping
				}
				return done, nil
			}
		}
		if ok, err := r.awaitSend(ctx, true, r.canSend); !ok {
			return done, err
		}
		xfer := overlap(&olen, len(p)-done)
		xfer = min(xfer, r.sbufAvail, int(m.offset+uint64(m.length)-off), r.cfg.SndBuf-r.sOff)
		copy(r.sbuf.Buf[r.sOff:], p[done:done+xfer])
		if err := r.ep.Write(0, verbs.Segment{Region: r.sbuf, Off: r.sOff, Len: xfer}, m.addr+off-m.offset, m.key, true); err != nil {
			r.fail(fmt.Errorf("rsocket: post direct write: %w", err))
			return done, r.err
		}
		r.posted(opWrite, xfer)
		done += xfer
	}
	return done, nil
}

// findMap is rs_find_iomap: the peer's window covering off.
func (r *Conn) findMap(off uint64) *iomap {
	for k := range r.peerMaps {
		if m := &r.peerMaps[k]; off >= m.offset && off < m.offset+uint64(m.length) {
			return m
		}
	}
	return nil
}

// WaitByte waits until the byte at off of window (from AllocIO) is want,
// as the peer's direct writes leave it (riostream's poll byte).
func (r *Conn) WaitByte(ctx context.Context, window verbs.Region, off int, want byte) error {
	b := &r.cfg.Backoff
	b.Reset()
	for r.ep.Peek(window, off) != want {
		// A peer that went away ends the wait, but only once the byte
		// was looked at after its disconnect was read: its last writes
		// are placed before its RS_CTRL_DISCONNECT completes here.
		if r.err != nil {
			return r.err
		}
		if r.state&connected == 0 {
			return ErrReset
		}
		// Credits and completions move on meanwhile.
		if r.step() {
			b.Reset()
			continue
		}
		if err := b.Idle(ctx, r.ep); err != nil {
			return err
		}
	}
	return nil
}

// PeerAddress is the peer's address, if the endpoint knows it.
func (r *Conn) PeerAddress() netip.Addr {
	if a, ok := r.ep.(interface{ PeerAddress() netip.AddrPort }); ok {
		return a.PeerAddress().Addr()
	}
	return netip.Addr{}
}
