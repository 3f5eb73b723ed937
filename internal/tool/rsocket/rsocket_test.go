package rsocket

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/internal/pcapfile"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/internal/tool/ndkverbs"
	"github.com/ndkxdp/ndkxdp/internal/tool/perftest/verbs"
	"github.com/ndkxdp/ndkxdp/ndk"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
)

// TestConnData: this side's rs_conn_data, byte for byte as
// rs_format_conn_data lays it out on a little-endian host, and what
// rs_save_conn_data takes from a peer's, refusing other versions.
func TestConnData(t *testing.T) {
	r := &Conn{cfg: Config{RcvBuf: 1 << 20, Queue: 384},
		targetReg: verbs.Region{Addr: 0x1122334455667788, RKey: 0xAABBCCDD},
		rbuf:      verbs.Region{Addr: 0x7f0000001000, RKey: 0x01020304}}
	pd := make([]byte, connLen)
	r.format(pd)
	want := []byte{
		1, flagIOMap, 0x01, 0x80, 0, 0, 0, 0, // version, flags, credits 384, reserved, iomap size 0
		0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0xAA, 0xBB, 0xCC, 0xDD, 0, 0, 0, 2, // target_sgl
		0, 0, 0x7f, 0, 0, 0, 0x10, 0, 1, 2, 3, 4, 0, 8, 0, 0, // data_buf: half of 1 MiB
	}
	if !bytes.Equal(pd, want) {
		t.Fatalf("conn data\n%x\nwant\n%x", pd, want)
	}
	var peer Conn
	if err := peer.save(pd); err != nil {
		t.Fatal(err)
	}
	if peer.remoteSGL != (sge{0x1122334455667788, 0xAABBCCDD, 2}) || peer.target[0] != (sge{0x7f0000001000, 0x01020304, 1 << 19}) ||
		peer.sseqComp != 384 || peer.remoteSGE != 1 || peer.swapSGL {
		t.Fatalf("saved %+v", peer)
	}
	// A big-endian peer (RS_CONN_FLAG_NET) gets its offers in its order.
	pd[1] |= flagNet
	if err := peer.save(pd); err != nil || !peer.swapSGL || peer.order() != binary.BigEndian {
		t.Fatalf("a big-endian peer: %v, swap %v", err, peer.swapSGL)
	}
	pd[0] = 2
	if err := peer.save(pd); err == nil {
		t.Fatal("version 2 accepted")
	}
	if err := peer.save(pd[:20]); err == nil {
		t.Fatal("20 bytes of private data accepted")
	}
}

// TestConfig: sizes out of rsocket's ranges are refused.
func TestConfig(t *testing.T) {
	for _, c := range []Config{{RcvBuf: 100}, {RcvBuf: 4097}, {SndBuf: 1000}, {Queue: 8}, {Queue: 70000}} {
		if err := c.check(); !errors.Is(err, verbs.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", c, err)
		}
	}
	c := Config{}
	if err := c.check(); err != nil || c.RcvBuf != DefaultBuffer || c.SndBuf != DefaultBuffer || c.Queue != DefaultQueue {
		t.Errorf("defaults: %+v, %v", c, err)
	}
}

// newPair opens two ndkxdp adapters on a veth pair, the client's frames
// captured, and listens on the server's port 7471.
func newPair(t *testing.T) (*ndkverbs.Connector, *ndkverbs.Listener, *lockedBuffer) {
	return newPairCapture(t, true)
}

func newPairCapture(t *testing.T, capturing bool) (*ndkverbs.Connector, *ndkverbs.Listener, *lockedBuffer) {
	t.Helper()
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{MTU: 1500, StaticNeighbours: true})
	capture := &lockedBuffer{}
	open := func(h *harness.Host, opts ndk.Options) *ndkverbs.Device {
		var a *ndk.Adapter
		if err := h.Do(func() (err error) { a, err = ndk.Open(h.Link, opts); return err }); err != nil {
			t.Fatalf("open %s: %v", h.Name, err)
		}
		t.Cleanup(a.Close)
		d, err := ndkverbs.New(a)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	var opts ndk.Options
	if capturing {
		opts.Capture = capture
	}
	cd := open(p.A, opts)
	sd := open(p.B, ndk.Options{})
	l, err := ndkverbs.Listen(sd, 7471, ndkverbs.Depths{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return &ndkverbs.Connector{Dev: cd, Peer: p.B.IPv4}, l, capture
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.b.Bytes())
}

// connect dials and accepts one connection.
func connect(t *testing.T, ctx context.Context, c *ndkverbs.Connector, l *ndkverbs.Listener, ccfg, scfg Config) (*Conn, *Conn) {
	t.Helper()
	var srv *Conn
	var serr error
	done := make(chan struct{})
	go func() { defer close(done); srv, serr = Accept(ctx, l, scfg) }()
	cli, cerr := Dial(ctx, c, 7471, ccfg)
	<-done
	if cerr != nil || serr != nil {
		t.Fatalf("dial: %v; accept: %v", cerr, serr)
	}
	return cli, srv
}

// TestStream moves 3 MB each way at once through small buffers (16 KiB
// receive buffers, 16-entry queues): writes of random sizes, reads into
// buffers smaller and larger than a transfer, every byte compared. Then
// the client shuts down: the server reads what was sent, then io.EOF,
// and its writes fail with ErrReset. The client's capture shows data in
// WRITEs with immediate of at most half the peer's buffer, the server's
// buffer offers and credits, and the client's RS_CTRL_DISCONNECT.
func TestStream(t *testing.T) {
	c, l, capture := newPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	small := Config{RcvBuf: 16384, SndBuf: 8192, Queue: 16}
	cli, srv := connect(t, ctx, c, l, small, small)
	const total = 3 << 20
	src := make([]byte, total)
	for i := range src {
		src[i] = byte(rand.Uint32())
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	got := make([][]byte, 2)
	for i, conn := range []*Conn{cli, srv} {
		i, conn := i, conn
		wg.Add(1)
		go func() { // each side writes and reads on one goroutine, without blocking
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			in := make([]byte, 0, total)
			buf := make([]byte, 1+rng.IntN(9000))
			for w := 0; (w < total || len(in) < total) && ctx.Err() == nil; {
				moved := false
				if w < total {
					n, err := conn.TryWrite(src[w:min(total, w+1+rng.IntN(70000))])
					if err != nil && !errors.Is(err, ErrWouldBlock) {
						errs[i] = err
						return
					}
					w += n
					moved = n > 0
				}
				if len(in) < total {
					n, err := conn.TryRead(buf)
					if err != nil && !errors.Is(err, ErrWouldBlock) {
						errs[i+2] = err
						return
					}
					in = append(in, buf[:n]...)
					moved = moved || n > 0
				}
				if !moved {
					runtime.Gosched()
				}
			}
			got[i] = in
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("side %d: %v", i%2, err)
		}
	}
	for i := range got {
		if !bytes.Equal(got[i], src) {
			t.Fatalf("side %d received %d bytes, not what was sent", 1-i, len(got[i]))
		}
	}
	// Small transfers: the server's reads of 8 (half its queue) give
	// credits back long before half its buffer is free.
	wrote := make(chan error, 1)
	go func() {
		for range 100 {
			if _, err := cli.Write(ctx, []byte("0123456789")); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	small100 := make([]byte, 1000)
	if err := srv.ReadFull(ctx, small100); err != nil || !bytes.Equal(small100, bytes.Repeat([]byte("0123456789"), 100)) {
		t.Fatalf("100 small transfers: %v", err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Write(ctx, []byte("last words")); err != nil {
		t.Fatal(err)
	}
	if err := cli.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	last := make([]byte, 100)
	n, err := srv.Read(ctx, last)
	if err != nil || string(last[:n]) != "last words" {
		t.Fatalf("read after the peer's shutdown: %q, %v", last[:n], err)
	}
	if n, err := srv.Read(ctx, last); err != io.EOF {
		t.Fatalf("read at the end: %d, %v; want io.EOF", n, err)
	}
	if _, err := srv.Write(ctx, []byte("x")); !errors.Is(err, ErrReset) {
		t.Fatalf("write to a peer that shut down: %v, want ErrReset", err)
	}
	cli.Close()
	srv.Close()

	f, err := pcapfile.Read(bytes.NewReader(capture.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var sent, offers, credits, disconnects int
	for _, pk := range f.Packets {
		var p rocev2.Packet
		if rocev2.Parse(pk.Data, &p) != nil || (p.BTH.Opcode != rocev2.RCWriteOnlyImm && p.BTH.Opcode != rocev2.RCWriteLastImm) {
			continue
		}
		outgoing := p.IP.Src == c.Dev.Adapter.LocalAddress()
		op, data := p.ImmDt>>29, p.ImmDt&dataMask
		switch {
		case outgoing && op == opData:
			if data == 0 || data > 8192 {
				t.Errorf("a transfer of %d bytes into 8 KiB offers", data)
			}
			sent += int(data)
		case !outgoing && op == opSGL && p.BTH.Opcode == rocev2.RCWriteOnlyImm && len(p.Payload) == sgeLen:
			offers++
			if l := binary.LittleEndian.Uint32(p.Payload[12:]); l != 8192 {
				t.Errorf("an offer of %d bytes, want half the 16 KiB buffer", l)
			}
		case !outgoing && op == opSGL:
			credits++
		case outgoing && op == opCtrl:
			disconnects++
			if data != ctrlDisconnect {
				t.Errorf("control message %d, want RS_CTRL_DISCONNECT", data)
			}
		}
	}
	if sent != total+1000+len("last words") || offers < total/8192-1 || credits == 0 || disconnects != 1 {
		t.Errorf("client's capture: %d bytes sent, %d offers and %d credit updates received, %d disconnects sent",
			sent, offers, credits, disconnects)
	}
}

// TestKeepalive: with Keepalive set, a side that waits sends zero-length
// RDMA WRITEs (RS_CTRL_KEEPALIVE, no immediate: the peer sees nothing)
// and the connection carries on.
func TestKeepalive(t *testing.T) {
	c, l, capture := newPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, srv := connect(t, ctx, c, l, Config{Keepalive: 20 * time.Millisecond}, Config{})
	wrote := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, err := srv.Write(ctx, []byte("late"))
		wrote <- err
	}()
	buf := make([]byte, 4)
	if err := cli.ReadFull(ctx, buf); err != nil || string(buf) != "late" {
		t.Fatalf("read %q, %v", buf, err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	cli.Close()
	srv.Close()
	f, err := pcapfile.Read(bytes.NewReader(capture.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	keepalives := 0
	for _, pk := range f.Packets {
		var p rocev2.Packet
		if rocev2.Parse(pk.Data, &p) == nil && p.BTH.Opcode == rocev2.RCWriteOnly && p.RETH.DMALen == 0 {
			keepalives++
		}
	}
	if keepalives < 3 || keepalives > 20 {
		t.Fatalf("%d zero-length WRITEs in 300 ms at one per 20 ms, want 3 to 20", keepalives)
	}
}

// TestCreditsOverrun: data messages beyond the credits given, which would
// overwrite unread ones, fail the connection instead.
func TestCreditsOverrun(t *testing.T) {
	r := &Conn{cfg: Config{Queue: 16}, rmsg: make([]uint32, 17), state: connected | readable | writable}
	for i := range 16 {
		r.received(&verbs.Completion{Op: verbs.OpRecvRDMAWithImm, Imm: msg(opData, uint32(i+1))})
	}
	if r.err != nil || r.rTail != 16 {
		t.Fatalf("16 messages within 16 credits: %v, %d queued", r.err, r.rTail)
	}
	r.received(&verbs.Completion{Op: verbs.OpRecvRDMAWithImm, Imm: msg(opData, 99)})
	if r.err == nil || r.state != 0 || r.rmsg[0] != 1 {
		t.Fatalf("a 17th message: err %v, state %d, first length %d", r.err, r.state, r.rmsg[0])
	}
}
