// Package pingpong is rdma-core's ibv_rc_pingpong and ibv_ud_pingpong
// (libibverbs/examples/rc_pingpong.c, ud_pingpong.c, pingpong.c) over
// ndkxdp, wire-compatible with them: the two sides swap
// "LID:QPN:PSN:GID" (MsgLen bytes each, "%04x:%06x:%06x:%032x") over a TCP
// socket, port 18515 by default, the client first; the server moves its
// QP to RTR before it answers, and the client says "done" after reading
// the answer. No rdma_cm and no IB CM: the QPs connect out of band
// (ndk's QP.ConnectOOB with the C tool's attributes: ACK timeout 14,
// retry 7, RNR retry 7, min RNR timer 12, one read each way; UD: Q_Key
// 0x11111111 and an address handle to the peer's GID).
//
// Then the client sends Size bytes, and each side, whenever its last send
// completed and a message arrived, sends again, until Iters sends and
// receives each, with RxDepth receives posted and topped up when one is
// left. UD receives have 40 bytes of GRH in front of the message, so the
// buffer is Size+40 and sends start at byte 40. Both print what the C
// tools print: their local and remote address lines and the "bytes in
// ... Mbit/sec" and "iters in ... usec/iter" lines. -c (Validate) makes
// the client write 0 at the start of each page before its first send and
// the server check those bytes at the end, printing "invalid data in page
// N" as the C tools do (i / page_size % sizeof(char) is 0), here also an
// error.
//
// -g's index means what rxe's GID table gives (GIDTable: 0 the
// link-local GID, 1 the first IPv4 address); ndkxdp takes only the entry
// of the address it sends from. Without -g a side
// sends the zero GID, as the C tools do, and a RoCE peer cannot be
// addressed: the tools then fail to reach RTR, and ndkxdp says to give
// -g.
//
// srq.go is srq_pingpong. None has the C tools' -o, -O, -P (ODP), -t
// (timestamps), -j (device memory), -N (new send API) or -U.
package pingpong

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/ndkxdp/ndkxdp/ndk"
)

// Defaults as rc_pingpong.c's and ud_pingpong.c's main.
const (
	DefaultPort    = 18515
	DefaultRCSize  = 4096
	DefaultUDSize  = 1024 // ud_pingpong's usage says 2048; its code sets 1024
	DefaultMTU     = 1024
	DefaultRxDepth = 500
	DefaultIters   = 1000
	// UDQKey is ud_pingpong's Q_Key.
	UDQKey = 0x11111111
	// GRHSpace is the room ud_pingpong leaves for the GRH.
	GRHSpace = 40
)

// Mode says which tool.
type Mode int

const (
	RC  Mode = iota // ibv_rc_pingpong
	UD              // ibv_ud_pingpong
	SRQ             // ibv_srq_pingpong (srq.go)
	UC              // ibv_uc_pingpong: rc_pingpong's exchange over a UC QP
)

// Config is a run's parameters; zero fields take the C tools' defaults
// (GIDIndex: set it, -1 is none).
type Config struct {
	Mode Mode
	// Server is the server's host name or address (getaddrinfo over TCP,
	// each address tried in turn); empty serves on Port.
	Server  string
	Port    int
	Size    int
	MTU     int // RC path MTU: 256, 512, 1024, 2048 or 4096
	RxDepth int
	Iters   int
	SL      int
	Events  bool // -e: wait for CQ notifications (NdkArmCq) instead of polling
	// Validate is -c.
	Validate bool
	// GID is what -g picked (PickGID); zero without -g.
	GID [16]byte
	// Listening, if set, hears that a server listens on its port.
	Listening func()
	// NumQP is srq_pingpong's -q: its QPs on one SRQ (default 16).
	NumQP int
}

// Stats is what a run saw.
type Stats struct {
	Local, Remote Dest
	Usec          float32
	Sent, Recvd   int
}

// ErrInvalidData is a -c server's finding that the bytes the C tools
// check did not arrive.
var ErrInvalidData = errors.New("invalid data in the received buffer")

func (c *Config) fill() error {
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Size == 0 {
		c.Size = DefaultRCSize
		if c.Mode == UD {
			c.Size = DefaultUDSize
		}
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.RxDepth == 0 {
		c.RxDepth = DefaultRxDepth
	}
	if c.Iters == 0 {
		c.Iters = DefaultIters
	}
	switch {
	case c.Port < 1 || c.Port > 65535:
		return fmt.Errorf("port %d: not a port", c.Port)
	case c.Size < 1:
		return fmt.Errorf("size %d: must be positive", c.Size)
	case c.RxDepth < 2:
		// One receive is always kept posted beside the one completing
		// (the C tools refill at routs <= 1).
		return fmt.Errorf("rx-depth %d: at least 2", c.RxDepth)
	case c.Iters < 1:
		return fmt.Errorf("iters %d: must be positive", c.Iters)
	case c.SL < 0 || c.SL > 15:
		return fmt.Errorf("sl %d: a service level is 0-15", c.SL)
	}
	switch c.MTU {
	case 256, 512, 1024, 2048, 4096:
	default:
		return fmt.Errorf("mtu %d: one of 256, 512, 1024, 2048, 4096", c.MTU)
	}
	return nil
}

// Work request ids, as the C tools': they double as bits of pending.
const (
	recvWRID = 1
	sendWRID = 2
)

// base is what every tool's side holds: the one buffer (filled with
// 0x7b), its MR, the PD and the one CQ, which Events arms.
type base struct {
	a      *ndk.Adapter
	pd     *ndk.PD
	cq     *ndk.CQ
	mr     *ndk.MR
	buf    []byte
	notify chan struct{}
}

func newBase(a *ndk.Adapter) base { return base{a: a, notify: make(chan struct{}, 1)} }

// initBase is pp_init_ctx's common part: a buffer of n bytes, its MR and
// a CQ of cqDepth, whose notifications wake notify with events.
func (b *base) initBase(n, cqDepth int, events bool) error {
	var err error
	if b.buf, err = b.a.Memory(n); err != nil {
		return fmt.Errorf("couldn't allocate work buf: %w", err)
	}
	for i := range b.buf {
		b.buf[i] = 0x7b
	}
	if b.pd, err = b.a.CreatePD(); err != nil {
		return fmt.Errorf("couldn't allocate PD: %w", err)
	}
	if b.mr, err = b.pd.RegisterMR(b.buf, ndk.MRFlagAllowLocalWrite); err != nil {
		return fmt.Errorf("couldn't register MR: %w", err)
	}
	var notify func(ndk.Status)
	if events {
		notify = func(ndk.Status) {
			select {
			case b.notify <- struct{}{}:
			default:
			}
		}
	}
	if b.cq, err = b.a.CreateCQ(cqDepth, notify); err != nil {
		return fmt.Errorf("couldn't create CQ: %w", err)
	}
	return nil
}

// closeBase releases what initBase made, after the QPs.
func (b *base) closeBase() {
	if b.mr != nil {
		_ = b.mr.Deregister()
	}
	if b.cq != nil {
		b.cq.Close()
	}
	if b.pd != nil {
		b.pd.Close()
	}
}

// markPages is -c on the client: a zero at the start of each page of
// the message (i / page_size % sizeof(char)).
func markPages(msg []byte) {
	for i := 0; i < len(msg); i += os.Getpagesize() {
		msg[i] = 0
	}
}

// checkPages is -c on the server: it names each page whose first byte
// is not the client's zero, as the C tools print them.
func checkPages(msg []byte, out io.Writer) error {
	bad := 0
	for i := 0; i < len(msg); i += os.Getpagesize() {
		if msg[i] != 0 {
			fmt.Fprintf(out, "invalid data in page %d\n", i/os.Getpagesize())
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%w: %d pages", ErrInvalidData, bad)
	}
	return nil
}

type run struct {
	base
	cfg  Config
	qp   *ndk.QP
	recv []ndk.SGE
	send []ndk.SGE
	dest ndk.UDDestination
	res  [2]ndk.ResultEx
}

// Run is one side of a pingpong on a: client when cfg.Server is set. It
// prints the C tool's lines to out.
func Run(ctx context.Context, a *ndk.Adapter, cfg Config, out io.Writer) (Stats, error) {
	var st Stats
	if err := cfg.fill(); err != nil {
		return st, err
	}
	if cfg.Mode == SRQ {
		return runSRQ(ctx, a, cfg, out)
	}
	r := &run{base: newBase(a), cfg: cfg}
	defer r.close()
	if err := r.init(); err != nil {
		return st, err
	}
	routs, err := r.postRecv(cfg.RxDepth)
	if err != nil {
		return st, fmt.Errorf("couldn't post receive (%d): %w", routs, err)
	}
	if cfg.Events {
		if err := r.cq.Arm(ndk.CQNotifyAny); err != nil {
			return st, fmt.Errorf("couldn't request CQ notification: %w", err)
		}
	}
	st.Local = Dest{QPN: r.qp.QPN(), GID: cfg.GID}
	if cfg.Mode == RC || cfg.Mode == UC {
		st.Local.PSN = r.qp.LocalEndpoint().PSN
	} else {
		st.Local.PSN = rand.Uint32() & 0xFFFFFF // lrand48() & 0xffffff
	}
	fmt.Fprint(out, AddressLine("local", st.Local, cfg.Mode == UD))
	if cfg.Server != "" {
		if st.Remote, err = r.clientExch(ctx, st.Local); err != nil {
			return st, err
		}
	} else if st.Remote, err = r.serverExch(ctx, st.Local); err != nil {
		return st, err
	}
	fmt.Fprint(out, AddressLine("remote", st.Remote, false))
	if cfg.Server != "" {
		if err := r.connect(st.Remote, st.Local); err != nil {
			return st, err
		}
	}

	pending := recvWRID
	if cfg.Server != "" {
		if cfg.Validate {
			markPages(r.buf[r.sendOff():][:cfg.Size])
		}
		if err := r.postSend(); err != nil {
			return st, fmt.Errorf("couldn't post send: %w", err)
		}
		pending |= sendWRID
	}
	start := time.Now()
	idle := 0
	for st.Recvd < cfg.Iters || st.Sent < cfg.Iters {
		if cfg.Events {
			select {
			case <-r.notify:
			case <-ctx.Done():
				return st, fmt.Errorf("waiting for a CQ event after %d sends and %d receives: %w", st.Sent, st.Recvd, ctx.Err())
			case <-a.Gone():
				return st, a.Err()
			}
			if err := r.cq.Arm(ndk.CQNotifyAny); err != nil {
				return st, fmt.Errorf("couldn't request CQ notification: %w", err)
			}
		}
		for {
			n := r.cq.GetResultsEx(r.res[:])
			if n == 0 {
				if cfg.Events {
					break
				}
				if idle++; idle%256 == 0 {
					if err := ctx.Err(); err != nil {
						return st, fmt.Errorf("after %d sends and %d receives: %w", st.Sent, st.Recvd, err)
					}
					if err := a.Err(); err != nil {
						return st, err
					}
					time.Sleep(20 * time.Microsecond)
				} else {
					runtime.Gosched()
				}
				continue
			}
			idle = 0
			for i := 0; i < n; i++ {
				wc := &r.res[i]
				id, _ := wc.RequestContext.(int)
				if wc.Status != ndk.StatusSuccess {
					return st, fmt.Errorf("failed status %v (%#x) for wr_id %d", wc.Status, uint32(wc.Status), id)
				}
				switch id {
				case sendWRID:
					st.Sent++
				case recvWRID:
					if routs--; routs <= 1 {
						k, err := r.postRecv(cfg.RxDepth - routs)
						routs += k
						if err != nil {
							return st, fmt.Errorf("couldn't post receive (%d): %w", routs, err)
						}
					}
					st.Recvd++
				default:
					return st, fmt.Errorf("completion for unknown wr_id %d", id)
				}
				pending &^= id
				if st.Sent < cfg.Iters && pending == 0 {
					if err := r.postSend(); err != nil {
						return st, fmt.Errorf("couldn't post send: %w", err)
					}
					pending = recvWRID | sendWRID
				}
			}
			if !cfg.Events {
				break
			}
		}
	}
	st.Usec = float32(time.Since(start).Microseconds())
	if st.Usec == 0 {
		st.Usec = 1 // the C tools divide by it too; gettimeofday's resolution is a microsecond
	}
	fmt.Fprint(out, ResultLines(cfg.Size, cfg.Iters, st.Usec))
	if cfg.Server == "" && cfg.Validate {
		return st, checkPages(r.buf[r.sendOff():][:cfg.Size], out)
	}
	return st, nil
}

// sendOff is where messages start in the buffer: after the GRH's room on
// UD.
func (r *run) sendOff() int {
	if r.cfg.Mode == UD {
		return GRHSpace
	}
	return 0
}

// init is pp_init_ctx: the buffer (filled with 0x7b), its MR, the CQ of
// RxDepth+1, the QP with one send and RxDepth receives.
func (r *run) init() error {
	cfg := r.cfg
	n := cfg.Size + r.sendOff()
	if err := r.initBase(n, cfg.RxDepth+1, cfg.Events); err != nil {
		return err
	}
	var err error
	qc := ndk.QPConfig{ReceiveCQ: r.cq, InitiatorCQ: r.cq, ReceiveQueueDepth: cfg.RxDepth, InitiatorQueueDepth: 1,
		MaxReceiveRequestSGE: 1, MaxInitiatorRequestSGE: 1, UC: cfg.Mode == UC}
	if cfg.Mode == UD {
		r.qp, err = r.pd.CreateUDQP(qc, UDQKey)
	} else {
		r.qp, err = r.pd.CreateQP(qc)
	}
	if err != nil {
		return fmt.Errorf("couldn't create QP: %w", err)
	}
	if cfg.Mode == UD {
		if mtu := int(r.qp.UDMaxMessage()); cfg.Size > mtu {
			return fmt.Errorf("requested size larger than port MTU (%d)", mtu)
		}
	}
	rs, err := r.mr.SGE(0, n)
	if err != nil {
		return err
	}
	ss, err := r.mr.SGE(r.sendOff(), cfg.Size)
	if err != nil {
		return err
	}
	r.recv, r.send = []ndk.SGE{rs}, []ndk.SGE{ss}
	return nil
}

func (r *run) close() {
	if r.qp != nil {
		_ = r.qp.Close()
	}
	r.closeBase()
}

// postRecv posts up to n receives of the whole buffer and says how many
// it posted.
func (r *run) postRecv(n int) (int, error) {
	for i := 0; i < n; i++ {
		if err := r.qp.Receive(recvWRID, r.recv); err != nil {
			return i, err
		}
	}
	return n, nil
}

func (r *run) postSend() error {
	if r.cfg.Mode == UD {
		return r.qp.SendTo(sendWRID, r.send, r.dest, 0)
	}
	return r.qp.Send(sendWRID, r.send, 0)
}

// connect is pp_connect_ctx: RTR and RTS with the C tool's attributes
// (RC), or the address handle to the peer (UD).
func (r *run) connect(rem, my Dest) error {
	if r.cfg.Mode == UD {
		if err := needGID(rem); err != nil {
			return err
		}
		d, err := r.a.UDDestinationTo(gidAddr(rem.GID), rem.QPN, UDQKey)
		if err != nil {
			return fmt.Errorf("failed to create AH: %w", err)
		}
		r.dest = d
		return nil
	}
	return connectRC(r.a, r.qp, r.cfg.MTU, rem, my)
}

// needGID refuses a peer that sent no GID.
func needGID(rem Dest) error {
	if rem.GID == ([16]byte{}) {
		return fmt.Errorf("couldn't connect to remote QP: the peer sent no GID (LID %#04x) and RoCE addresses peers by GID: run both sides with -g (a GID index of show_gids)", rem.LID)
	}
	return nil
}

// connectRC is pp_connect_ctx for one RC QP: RTR and RTS with the C
// tools' attributes.
func connectRC(a *ndk.Adapter, qp *ndk.QP, mtu int, rem, my Dest) error {
	if err := needGID(rem); err != nil {
		return err
	}
	ip := gidAddr(rem.GID)
	if my.GID == ([16]byte{}) {
		return errors.New("failed to modify QP to RTR: RoCE needs a source GID: give -g (a GID index of show_gids)")
	}
	// The address vector, as RTR's ah_attr: the next hop's MAC through
	// the adapter's own route and neighbour lookup (as Connect's), which
	// a daemon makes in its namespace, where ConnectOOB left to resolve
	// it would probe from the caller's.
	ah, err := a.UDDestinationTo(ip, rem.QPN, 0)
	if err != nil {
		return fmt.Errorf("failed to modify QP to RTR: %w", err)
	}
	seven := 7
	err = qp.ConnectOOB(ndk.Endpoint{IP: ip, MAC: ah.MAC[:], QPN: rem.QPN, PSN: rem.PSN}, ndk.ConnectOptions{
		PathMTU:          mtu,
		InboundReadLimit: 1, OutboundReadLimit: 1, // max_dest_rd_atomic, max_rd_atomic
		AckTimeout:  4096 * time.Nanosecond << 14, // timeout 14
		RetryCount:  &seven,
		RNRRetry:    &seven,
		MinRNRTimer: 640 * time.Microsecond, // min_rnr_timer 12: 0.64 ms
	})
	if err != nil {
		return fmt.Errorf("failed to modify QP to RTR: %w", err)
	}
	return nil
}

// clientExch is pp_client_exch_dest: connect to the server (each address
// getaddrinfo gives, in turn), swap addresses.
func (r *run) clientExch(ctx context.Context, my Dest) (Dest, error) {
	rem, err := clientExch(ctx, r.cfg, []Dest{my})
	if err != nil {
		return Dest{}, err
	}
	return rem[0], nil
}

// clientExch is pp_client_exch_dest for any number of QPs.
func clientExch(ctx context.Context, cfg Config, my []Dest) ([]Dest, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(cfg.Server, strconv.Itoa(cfg.Port)))
	if err != nil {
		return nil, fmt.Errorf("couldn't connect to %s:%d: %w", cfg.Server, cfg.Port, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	return clientExchange(c, my)
}

// serverExch is pp_server_exch_dest: listen on the port (every address),
// take one client, read its address, connect, answer, wait for "done".
func (r *run) serverExch(ctx context.Context, my Dest) (Dest, error) {
	rem, err := serverExch(ctx, r.cfg, []Dest{my}, func(rem []Dest) error { return r.connect(rem[0], my) })
	if err != nil {
		return Dest{}, err
	}
	return rem[0], nil
}

// serverExch is pp_server_exch_dest for len(my) QPs: connect runs on the
// client's addresses before the server answers with its own.
func serverExch(ctx context.Context, cfg Config, my []Dest, connect func(rem []Dest) error) ([]Dest, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", net.JoinHostPort("", strconv.Itoa(cfg.Port)))
	if err != nil {
		return nil, fmt.Errorf("couldn't listen to port %d: %w", cfg.Port, err)
	}
	stopL := context.AfterFunc(ctx, func() { l.Close() })
	if cfg.Listening != nil {
		cfg.Listening()
	}
	c, err := l.Accept()
	stopL()
	l.Close()
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("accept() failed: %w", err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	rem, err := serverRead(c, len(my))
	if err != nil {
		return nil, err
	}
	if err := connect(rem); err != nil {
		return nil, fmt.Errorf("couldn't connect to remote QP: %w", err)
	}
	return rem, serverReply(c, my)
}
