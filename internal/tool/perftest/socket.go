package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
)

// perftest without -R (v4.5-0.17 and 25.01 perftest_communication.c:
// ethernet_client_connect, ethernet_server_connect, ctx_xchg_data_ethernet,
// ethernet_write_keys, ethernet_read_keys, ctx_close_connection;
// perftest_resources.c ctx_connect) exchanges its control messages over
// a TCP connection to the server's port -p and connects the data QP out
// of band:
//
//   - The server listens on TCP port -p of every address and accepts one
//     connection; the client connects to it, once (no retry).
//   - Every ctx_xchg_data message (versions, system data, MTU, reports)
//     is written as raw bytes, the client first, the server answering,
//     each side reading exactly the message's size.
//   - A handshake carries pingpong_dest as text: KEY_PRINT_FMT_GID,
//     "%04x:%04x:%06x:%06x:%08x:%016llx:" then the GID's 16 bytes "%02x:"
//     each and "%08x:" (lid, out_reads, qpn, psn, rkey, vaddr, gid,
//     srqn), written as the whole 108-byte buffer with its NUL. On
//     Ethernet the GID index is never -1 (perftest takes 0 where -x is
//     not given), so the GID form is the only one.
//   - No zeroed handshakes and no rdma_cm: the first handshake (one per
//     QP) gives each side the other's QPN, PSN, GID and out_reads;
//     ctx_connect then moves the QP to RTR (path MTU as check_mtu agreed,
//     rq_psn the peer's PSN, max_dest_rd_atomic its own out_reads, min
//     RNR timer 12) and RTS (sq_psn its own PSN, timeout -u (14), retry_cnt 7,
//     rnr_retry 7, max_rd_atomic the peer's out_reads). The handshakes
//     that follow are those of rdma_cm mode.
//   - -q: every QP's address goes in its own gather handshake, and each
//     is connected after all are gathered.
//   - -c UD: UD QPs of Q_Key DEF_QKEY (0x11111111, not rdma_cm's), each
//     side sending to the QPN and GID the handshake gave (ibv_create_ah
//     from the RTR's address vector); the latency test's server needs
//     no first datagram to learn its client.
//   - ctx_close_connection follows the closing handshake with "done"
//     and its NUL (5 bytes) from each side, which nobody reads, and
//     closes the socket. The data QP is destroyed without a word.
//
// Comm says which a side uses.

// Comm is how the two sides exchange control messages.
type Comm int

const (
	// CommAuto: a client connects through rdma_cm and, where its REQ
	// finds no listener (REJ reason 8), over TCP, retrying both as
	// Params.ConnectRetry says; a server takes whichever comes first.
	// A peer perftest then works with -R or without it. Endpoints
	// without verbs.Direct (or for -c UD verbs.DirectUD) take rdma_cm
	// only.
	CommAuto Comm = iota
	// CommRDMACM is -R: rdma_cm only.
	CommRDMACM
	// CommTCP is perftest's default without -R: TCP only.
	CommTCP
	// CommRDMACMControl is -z (--comm_rdma_cm): the control messages go
	// over an rdma_cm connection, as with -R, but the data QPs connect
	// out of band, as without it (work_rdma_cm off, use_rdma_cm on).
	CommRDMACMControl
)

// KeyMsgLen is KEY_MSG_SIZE_GID, the text pingpong_dest with its NUL.
const KeyMsgLen = 108

// doneMsg is what ctx_close_connection writes after the last handshake.
var doneMsg = []byte("done\x00")

// DefQKey is the Q_Key of perftest's UD QPs without -R (DEF_QKEY).
const DefQKey = 0x11111111

// maker makes the data QPs of socket mode: m's verbs.Direct, or for -c
// UD its verbs.DirectUD. ok is false where m has none.
func maker(p *Params, m any) (make func(verbs.ConnParams) (verbs.OOB, error), ok bool) {
	if p.UD {
		if d, ok := m.(verbs.DirectUD); ok {
			return func(cp verbs.ConnParams) (verbs.OOB, error) { return d.UnconnectedUD(cp, DefQKey) }, true
		}
		return nil, false
	}
	if d, ok := m.(verbs.Direct); ok {
		return d.Unconnected, true
	}
	return nil, false
}

// EncodeKey writes d as ethernet_write_keys does (KEY_PRINT_FMT_GID).
func EncodeKey(d *Dest) [KeyMsgLen]byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%04x:%04x:%06x:%06x:%08x:%016x:", uint32(d.LID), uint32(d.OutReads), uint32(d.QPN), uint32(d.PSN), d.RKey, d.VAddr)
	for _, g := range d.GID {
		fmt.Fprintf(&b, "%02x:", g)
	}
	fmt.Fprintf(&b, "%08x:", d.SRQN)
	var out [KeyMsgLen]byte
	copy(out[:KeyMsgLen-1], b.String())
	return out
}

// DecodeKey reads a KEY_PRINT_FMT_GID message as ethernet_read_keys
// does: colon-separated hexadecimal fields up to the NUL.
func DecodeKey(b []byte) (Dest, error) {
	s := string(b)
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	f := strings.Split(s, ":")
	if len(f) < 23 {
		return Dest{}, fmt.Errorf("pingpong_dest %q: %d fields, want 23: %w", s, len(f), ErrProtocol)
	}
	var v [23]uint64
	bits := [6]int{16, 16, 24, 24, 32, 64}
	for i := range v {
		n := 8
		switch {
		case i < 6:
			n = bits[i]
		case i < 22:
			n = 8
		default:
			n = 32
		}
		x, err := strconv.ParseUint(f[i], 16, n)
		if err != nil {
			return Dest{}, fmt.Errorf("pingpong_dest %q, field %d: %w", s, i, ErrProtocol)
		}
		v[i] = x
	}
	d := Dest{LID: int32(v[0]), OutReads: int32(v[1]), QPN: int32(v[2]), PSN: int32(v[3]), RKey: uint32(v[4]), VAddr: v[5], SRQN: uint32(v[22])}
	for i := range d.GID {
		d.GID[i] = byte(v[6+i])
	}
	return d, nil
}

// sockChannel is the TCP control connection, with the device that makes
// the out-of-band data QP.
type sockChannel struct {
	conn net.Conn
	in   [KeyMsgLen]byte
}

func newSockChannel(conn net.Conn) *sockChannel { return &sockChannel{conn: conn} }

// bound makes ctx's end (a cancelled run, -D's bound) unblock the
// socket call that follows, until the returned stop.
func (s *sockChannel) bound(ctx context.Context) func() bool {
	return context.AfterFunc(ctx, func() { s.conn.SetDeadline(time.Unix(1, 0)) })
}

func (s *sockChannel) write(ctx context.Context, b []byte) error {
	defer s.bound(ctx)()
	if _, err := s.conn.Write(b); err != nil {
		return fmt.Errorf("control write: %w", ctxErr(ctx, err))
	}
	return nil
}

func (s *sockChannel) read(ctx context.Context, n int) ([]byte, error) {
	defer s.bound(ctx)()
	if _, err := io.ReadFull(s.conn, s.in[:n]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("the peer closed the control connection: %w", verbs.ErrDisconnected)
		}
		return nil, fmt.Errorf("control read: %w", ctxErr(ctx, err))
	}
	return s.in[:n], nil
}

// ctxErr prefers the context's reason over the deadline it set.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}

// xchg is ctx_xchg_data_ethernet: the client writes first.
func (s *sockChannel) xchg(ctx context.Context, client bool, mine []byte) ([]byte, error) {
	if client {
		if err := s.write(ctx, mine); err != nil {
			return nil, err
		}
		return s.read(ctx, len(mine))
	}
	theirs, err := s.read(ctx, len(mine))
	if err != nil {
		return nil, err
	}
	return theirs, s.write(ctx, mine)
}

// handshake is ctx_hand_shake with ethernet_write_keys and
// ethernet_read_keys.
func (s *sockChannel) handshake(ctx context.Context, client bool, mine *Dest) (Dest, error) {
	b := EncodeKey(mine)
	theirs, err := s.xchg(ctx, client, b[:])
	if err != nil {
		return Dest{}, fmt.Errorf("handshake: %w", err)
	}
	return DecodeKey(theirs)
}

// closing is ctx_close_connection: the handshake, "done", and the end of
// the connection. The peer's "done" is read (briefly) so that the close
// sends a FIN rather than a reset over unread data.
func (s *sockChannel) closing(ctx context.Context, client bool, mine *Dest) error {
	if _, err := s.handshake(ctx, client, mine); err != nil {
		return err
	}
	if err := s.write(ctx, doneMsg); err != nil {
		return err
	}
	if tc, ok := s.conn.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	s.conn.SetReadDeadline(time.Now().Add(time.Second))
	io.Copy(io.Discard, s.conn)
	return nil
}

func (s *sockChannel) close() { s.conn.Close() }

// peerAddresser is implemented by connectors that know the server's
// address and their own (ndkverbs.Connector): socket mode dials the one
// from the other.
type peerAddresser interface {
	PeerAddress() netip.Addr
	LocalAddress() netip.Addr
}

// clientDirect returns what makes the client's out-of-band QPs and the
// two ends of the TCP connection where the client may use socket mode,
// or nil.
func clientDirect(p *Params, c verbs.Connector) (mk func(verbs.ConnParams) (verbs.OOB, error), local, peer netip.Addr) {
	mk, ok := maker(p, c)
	pa, ok2 := c.(peerAddresser)
	if !ok || !ok2 || p.Comm == CommRDMACM || p.Comm == CommRDMACMControl {
		return nil, netip.Addr{}, netip.Addr{}
	}
	return mk, pa.LocalAddress(), pa.PeerAddress()
}

// noOOB is the error of a -z side whose endpoints cannot connect out of
// band.
func noOOB(p *Params, m any) (func(verbs.ConnParams) (verbs.OOB, error), error) {
	mk, ok := maker(p, m)
	if !ok {
		return nil, fmt.Errorf("perftest: -z: %T cannot connect QPs out of band: %w", m, ErrUnsupported)
	}
	return mk, nil
}

// dialControl opens the client's control connection as p.Comm says,
// retrying where nobody listens yet (REJ reason 8, a refused TCP
// connection). It returns the rdma_cm endpoint, or nil with ctl.sock set;
// ctl.oob is set where the data QPs connect out of band.
func dialControl(ctx context.Context, p *Params, c verbs.Connector, ctl *control) (verbs.Endpoint, error) {
	direct, local, host := clientDirect(p, c)
	if p.Comm == CommTCP && direct == nil {
		return nil, fmt.Errorf("perftest: control over TCP (no -R): %T cannot connect QPs out of band: %w", c, ErrUnsupported)
	}
	if p.Comm == CommRDMACMControl {
		var err error
		if ctl.oob, err = noOOB(p, c); err != nil {
			return nil, err
		}
	}
	addr := net.JoinHostPort(host.String(), strconv.Itoa(int(p.Port)))
	var last error
	for attempt := 0; ; attempt++ {
		if p.Comm != CommTCP {
			ep, err := c.Connect(ctx, p.Port, verbs.ConnParams{RetryCount: 7, RNRRetryCount: 7, Prepare: prepareControl(ctl)})
			var rej *verbs.RejectError
			switch {
			case err == nil:
				return ep, nil
			case !errors.As(err, &rej) || rej.Reason != verbs.RejectInvalidServiceID:
				return nil, err
			}
			last = err
		}
		if direct != nil {
			// From the adapter's own address: the control connection goes
			// where the QPs go, and where the calling thread's network
			// namespace has no such address, nowhere (EADDRNOTAVAIL).
			d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: local.AsSlice()}}
			conn, err := d.DialContext(ctx, "tcp", addr)
			switch {
			case err == nil:
				ctl.sock, ctl.oob = newSockChannel(conn), direct
				return nil, nil
			case !errors.Is(err, syscall.ECONNREFUSED) && p.Comm == CommAuto:
				// Not a server that is not up yet: rdma_cm alone from now on.
				direct = nil
				last = fmt.Errorf("%w; and TCP %s from %v: %w", last, addr, local, err)
			case !errors.Is(err, syscall.ECONNREFUSED):
				return nil, fmt.Errorf("connect to %s from %v: %w", addr, local, err)
			case last != nil:
				last = fmt.Errorf("%w; and TCP %s: %w", last, addr, err)
			default:
				last = fmt.Errorf("TCP %s: %w", addr, err)
			}
		}
		if attempt >= p.ConnectRetry.Attempts {
			if attempt > 0 {
				last = fmt.Errorf("after %d attempts: %w", attempt+1, last)
			}
			return nil, last
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("retrying the control connection: %w (%w)", ctx.Err(), last)
		case <-afterFunc(p.ConnectRetry.Interval):
		}
	}
}

// acceptControl accepts the server's control connection as p.Comm says:
// on l (rdma_cm), on TCP port p.Port, or on whichever a client reaches
// first. It returns the control, and the rdma_cm endpoint if that won.
func acceptControl(ctx context.Context, p *Params, l verbs.Listener, warn io.Writer) (*control, verbs.Endpoint, error) {
	direct, _ := maker(p, l)
	if p.Comm == CommRDMACMControl {
		mk, err := noOOB(p, l)
		if err != nil {
			return nil, nil, err
		}
		ctl, ep, err := rdmaAccept(ctx, l)
		if ctl != nil {
			ctl.oob = mk
		}
		return ctl, ep, err
	}
	if p.Comm == CommRDMACM {
		direct = nil
	}
	if p.Comm == CommTCP && direct == nil {
		return nil, nil, fmt.Errorf("perftest: control over TCP (no -R): %T cannot connect QPs out of band: %w", l, ErrUnsupported)
	}
	rdma := func(ctx context.Context) (*control, verbs.Endpoint, error) { return rdmaAccept(ctx, l) }
	if direct == nil {
		return rdma(ctx)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort("", strconv.Itoa(int(p.Port))))
	if err != nil {
		if p.Comm == CommTCP {
			return nil, nil, fmt.Errorf("listen on TCP port %d: %w", p.Port, err)
		}
		fmt.Fprintf(warn, "perftest: rdma_cm only: listen on TCP port %d: %v\n", p.Port, err)
		return rdma(ctx)
	}
	defer ln.Close()
	type won struct {
		ctl *control
		ep  verbs.Endpoint
		err error
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan won, 2)
	waiting := 1
	if p.Comm != CommTCP {
		waiting++
		go func() {
			ctl, ep, err := rdma(actx)
			results <- won{ctl, ep, err}
		}()
	}
	go func() {
		stop := context.AfterFunc(actx, func() { ln.Close() })
		defer stop()
		conn, err := ln.Accept()
		if err != nil {
			results <- won{err: fmt.Errorf("accept on TCP port %d: %w", p.Port, ctxErr(actx, err))}
			return
		}
		results <- won{ctl: &control{sock: newSockChannel(conn), oob: direct}}
	}()
	first := <-results
	cancel()
	ln.Close()
	for waiting--; waiting > 0; waiting-- {
		if late := <-results; late.err == nil {
			late.ctl.release(late.ep)
		}
	}
	return first.ctl, first.ep, first.err
}

// rdmaAccept accepts an rdma_cm control connection on l.
func rdmaAccept(ctx context.Context, l verbs.Listener) (*control, verbs.Endpoint, error) {
	ctl := &control{}
	ep, err := l.Accept(ctx, verbs.ConnParams{RetryCount: 7, RNRRetryCount: 7, Prepare: prepareControl(ctl)})
	return ctl, ep, err
}

// release closes what a control connection holds.
func (c *control) release(ep verbs.Endpoint) {
	if ep != nil {
		ep.Close()
	}
	if c.sock != nil {
		c.sock.close()
	}
}

// connectDirect opens the data QP out of band (socket mode): a QP made
// with params, the first handshake, which gives the peer's QPN, PSN and
// GID, and ctx_connect. It returns the endpoint with res.Local and
// res.Peer set.
func connectDirect(ctx context.Context, p *Params, ctl *control, d *data, params func() (verbs.ConnParams, error), res *Result) (verbs.Endpoint, error) {
	cp, err := params()
	if err != nil {
		return nil, err
	}
	// The peer's address comes from the handshake, not a datagram.
	cp.UDAnnounce = false
	ep, err := ctl.oob(cp)
	if err != nil {
		return nil, fmt.Errorf("create the data QP: %w", err)
	}
	res.Local = directDest(p, d, ep)
	if res.Peer, err = ctl.handshake(ctx, &res.Local); err == nil {
		err = connectTo(ctx, p, ep, &res.Local, &res.Peer, res.MTU)
	}
	if err != nil {
		ep.Close()
		return nil, err
	}
	return ep, nil
}

// directDest is the pingpong_dest of a QP that Direct made: its own
// QPN, PSN and GID, which the peer connects to.
func directDest(p *Params, d *data, ep verbs.OOB) Dest {
	local := ep.Local()
	dst := d.dest(p)
	dst.QPN, dst.PSN, dst.GID = int32(local.QPN), int32(local.PSN), local.GID
	return dst
}

// connectTo is ctx_connect for one QP: RTR and RTS with perftest's
// attributes, once ctx_check_gid_compatibility agreed.
func connectTo(ctx context.Context, p *Params, ep verbs.OOB, local, peer *Dest, mtu int) error {
	if mapped(local.GID) != mapped(peer.GID) {
		// ctx_check_gid_compatibility's words.
		return fmt.Errorf("found incompatibility issue with GID types (ours %v, the peer's %v): please try to use a different IP version: %w",
			netip.AddrFrom16(local.GID), netip.AddrFrom16(peer.GID), verbs.ErrInvalid)
	}
	err := ep.ConnectTo(ctx, verbs.Address{QPN: uint32(peer.QPN) & 0xFFFFFF, PSN: uint32(peer.PSN) & 0xFFFFFF, GID: peer.GID}, verbs.OOBParams{
		MTU:          mtu,
		InboundReads: p.OutReads, OutboundReads: int(peer.OutReads),
		AckTimeout:  4096 * time.Nanosecond << p.QPTimeout, // -u
		RetryCount:  7,
		RNRRetry:    7,
		MinRNRTimer: 640 * time.Microsecond, // MIN_RNR_TIMER 12
	})
	if err != nil {
		return fmt.Errorf("unable to connect the HCA's through the link: %w", err)
	}
	return nil
}

// mapped says whether a GID is an IPv4-mapped address.
func mapped(g [16]byte) bool { return netip.AddrFrom16(g).Is4In6() }
