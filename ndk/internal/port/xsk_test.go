package port

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndkxdp/ndkxdp/afxdp"
	"github.com/ndkxdp/ndkxdp/internal/testenv"
	"github.com/ndkxdp/ndkxdp/internal/tool/baseline"
	"github.com/ndkxdp/ndkxdp/loader"
	"github.com/ndkxdp/ndkxdp/rocev2"
	"github.com/ndkxdp/ndkxdp/test/harness"
	"golang.org/x/sys/unix"
)

// testQPN is the destination QP of the test frames; each end's steering
// program sends it to queue 0.
const testQPN = 0x00beef

type xskEnd struct {
	host *harness.Host
	xdp  *loader.XDP
	umem *afxdp.UMEM
	port *XSK
	ref  []byte // the UMEM bytes the port may reference (xskOptions.ref)
}

type xskOptions struct {
	mode   loader.AttachMode
	multi  bool
	txRing uint32
	cfg    XSKConfig
	// ref gives the port half of the UMEM's frames and makes the other
	// half its TxReference, as ndk.Open does with its buffer pool.
	ref bool
	// slots lays the TxReference half out as a buffer pool with
	// headroom (TxSlots); frameSize is the UMEM's chunk (default 4096).
	slots     bool
	frameSize uint32
	// scatter orders the allocator's free frames so that no two it hands
	// out in a row are neighbours in the UMEM.
	scatter bool
}

// openXSK attaches the steering program to h's veth, binds a socket on
// queue 0, steers testQPN to it and makes an XSK of it.
func openXSK(t testing.TB, h *harness.Host, o xskOptions) *xskEnd {
	t.Helper()
	e := &xskEnd{host: h}
	var sock *afxdp.Socket
	err := h.Do(func() error {
		var err error
		if e.xdp, err = loader.Attach(h.Link, loader.Options{Mode: o.mode}); err != nil {
			return err
		}
		if e.umem, err = afxdp.NewUMEM(afxdp.UMEMConfig{FrameSize: o.frameSize}); err != nil {
			return err
		}
		sock, err = afxdp.NewSocket(e.umem, afxdp.SocketConfig{Ifindex: h.Ifindex, Queue: 0, MultiBuffer: o.multi, TxRingSize: o.txRing})
		if err != nil {
			return err
		}
		if err := e.xdp.RegisterSocket(0, sock.FD()); err != nil {
			return err
		}
		return e.xdp.AddQP(testQPN, 0)
	})
	t.Cleanup(func() {
		if e.port != nil {
			e.port.Close()
		}
		if e.umem != nil {
			e.umem.Close()
		}
		if e.xdp != nil {
			e.xdp.Close()
		}
	})
	if err != nil {
		t.Fatalf("open AF_XDP on %s/%s: %v", h.Name, h.Link, err)
	}
	o.cfg.MTU = h.MTU
	frames := e.umem.Allocator()
	if o.ref {
		parts, err := e.umem.Partition(2)
		if err != nil {
			t.Fatal(err)
		}
		frames = parts[0]
		lo, hi := parts[1].Range()
		o.cfg.TxReference = [2]uint64{lo, hi}
		e.ref = e.umem.Bytes()[lo:hi]
		if o.slots {
			if o.cfg.TxSlots, err = NewTxSlots(int(hi - lo)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if o.scatter {
		// Alloc pops the last freed: freeing the even frames, then the
		// odd ones, hands out odd frames two apart, then even ones.
		var addrs []uint64
		for a, ok := frames.Alloc(); ok; a, ok = frames.Alloc() {
			addrs = append(addrs, a)
		}
		for parity := range 2 {
			for i := parity; i < len(addrs); i += 2 {
				if err := frames.Free(addrs[i]); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if e.port, err = NewXSK(sock, frames, o.cfg); err != nil {
		t.Fatal(err)
	}
	return e
}

func xskPair(t testing.TB, hc harness.Config, o xskOptions) (*harness.Pair, *xskEnd, *xskEnd) {
	t.Helper()
	testenv.RequireRoot(t)
	p := harness.New(t, hc)
	return p, openXSK(t, p.A, o), openXSK(t, p.B, o)
}

// roceFrame builds a valid RC SEND_ONLY frame from src to dst carrying
// payload.
func roceFrame(t testing.TB, src, dst *harness.Host, psn int, payload []byte) []byte {
	t.Helper()
	h := rocev2.Headers{
		Eth: rocev2.EthernetFields{Dst: rocev2.MAC(dst.MAC), Src: rocev2.MAC(src.MAC)},
		IP:  rocev2.NewIPFields(src.IPv4, dst.IPv4),
		UDP: rocev2.UDPFields{SrcPort: rocev2.UDPSourcePort(0, testQPN, testQPN)},
		BTH: rocev2.BTHFields{Opcode: rocev2.RCSendOnly, PKey: rocev2.DefaultPKey, DestQP: testQPN, PSN: rocev2.PSN(psn)},
	}
	buf := make([]byte, h.FrameLen(len(payload)))
	n, err := h.Encode(buf, payload)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return buf[:n]
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// split cuts f into up to three segments at the given offsets.
func split(f []byte, cuts ...int) [][]byte {
	var segs [][]byte
	prev := 0
	for _, c := range cuts {
		c = min(c, len(f))
		segs = append(segs, f[prev:c])
		prev = c
	}
	return append(segs, f[prev:])
}

// receive waits up to 5s for n frames at e and returns copies.
func receive(t testing.TB, e *XSK, n int) [][]byte {
	t.Helper()
	var got [][]byte
	out := make([][]byte, 16)
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < n {
		k := e.Receive(out)
		for _, f := range out[:k] {
			got = append(got, bytes.Clone(f))
		}
		if k > 0 {
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d frames within 5s (stats %+v)", len(got), n, e.Stats())
		}
		if err := e.Wait(50 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	e.Release()
	return got
}

// sameFrame reports whether got is want, allowing the Ethernet padding a
// short frame picks up on the way to 60 bytes.
func sameFrame(got, want []byte) bool {
	return len(got) >= len(want) && len(got) <= max(len(want), 60) && bytes.Equal(got[:len(want)], want)
}

func TestXSKExchangesFrames(t *testing.T) {
	for _, m := range []struct {
		name string
		mode loader.AttachMode
	}{{"driver", loader.AttachDriver}, {"generic", loader.AttachGeneric}} {
		t.Run(m.name, func(t *testing.T) {
			p, a, b := xskPair(t, harness.Config{}, xskOptions{mode: m.mode})
			if a.port.MaxFrame() != 1500+18 {
				t.Fatalf("MaxFrame %d, want MTU 1500 + 18", a.port.MaxFrame())
			}
			for _, dir := range []struct {
				from, to *xskEnd
			}{{a, b}, {b, a}} {
				var want [][]byte
				for i, size := range []int{0, 1, 64, 1024, 1442} {
					f := roceFrame(t, dir.from.host, dir.to.host, i, pattern(size, byte(i)))
					want = append(want, f)
					// Headers, payload, ICRC: the engine's three segments.
					segs := split(f, 54, len(f)-4)
					if err := dir.from.port.Transmit(segs); err != nil {
						t.Fatalf("transmit %d-byte payload: %v", size, err)
					}
				}
				if err := dir.from.port.Flush(); err != nil {
					t.Fatal(err)
				}
				got := receive(t, dir.to.port, len(want))
				for i := range want {
					if !sameFrame(got[i], want[i]) {
						t.Fatalf("%s -> %s frame %d differs\n got %x\nwant %x", dir.from.host.Name, dir.to.host.Name, i, got[i], want[i])
					}
					var pkt rocev2.Packet
					if err := rocev2.Parse(got[i], &pkt); err != nil {
						t.Fatalf("frame %d does not parse: %v", i, err)
					}
				}
				st := dir.to.port.Stats()
				if st.RxFrames != uint64(len(want)) || st.RxChained != 0 || st.RxInvalid != 0 {
					t.Fatalf("receiver stats %+v", st)
				}
				if st := dir.from.port.Stats(); st.TxFrames != uint64(len(want)) || st.TxChained != 0 {
					t.Fatalf("transmitter stats %+v", st)
				}
			}
			_ = p
		})
	}
}

// TestXSKJumboChains moves 9000-byte-MTU frames, larger than a 4096-byte
// UMEM frame, as descriptor chains both ways, with segment boundaries that
// straddle chunk boundaries, and more chains than one batch has scratch
// buffers for.
func TestXSKJumboChains(t *testing.T) {
	const scratch = 2
	_, a, b := xskPair(t, harness.Config{MTU: 9000}, xskOptions{mode: loader.AttachDriver, multi: true, cfg: XSKConfig{Scratch: scratch}})
	if a.port.MaxFrame() != 9018 {
		t.Fatalf("MaxFrame %d, want 9018", a.port.MaxFrame())
	}
	maxPayload := 9000 - 20 - 8 - rocev2.BTHLen - 4
	sizes := []int{100, 4096, 4097, 8192, 3000, maxPayload}
	var want [][]byte
	for i, size := range sizes {
		f := roceFrame(t, a.host, b.host, i, pattern(size, byte(3*i)))
		want = append(want, f)
		if err := a.port.Transmit(split(f, 54, 4095, 4097)); err != nil {
			t.Fatalf("transmit %d-byte frame: %v", len(f), err)
		}
	}
	if err := a.port.Flush(); err != nil {
		t.Fatal(err)
	}
	// Collect with a batch larger than the scratch: a batch must stop at
	// the third chain and the rest arrive in the next ones, in order.
	var got [][]byte
	out := make([][]byte, 8)
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < len(want) && time.Now().Before(deadline) {
		before := b.port.Stats()
		n := b.port.Receive(out)
		for _, f := range out[:n] {
			got = append(got, bytes.Clone(f))
		}
		// Chains joined in place need no scratch buffer; the others do.
		after := b.port.Stats()
		if gathered := (after.RxChained - after.RxJoined) - (before.RxChained - before.RxJoined); gathered > scratch {
			t.Fatalf("one batch gathered %d chained frames with %d scratch buffers", gathered, scratch)
		}
		if n == 0 {
			_ = b.port.Wait(50 * time.Millisecond)
		}
	}
	b.port.Release()
	if len(got) != len(want) {
		t.Fatalf("received %d of %d frames (stats %+v)", len(got), len(want), b.port.Stats())
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("frame %d: %d bytes received differ from the %d sent", i, len(got[i]), len(want[i]))
		}
	}
	chained := 0
	for _, f := range want {
		if len(f) > 4096-256 {
			chained++
		}
	}
	if st := b.port.Stats(); st.RxChained != uint64(chained) || st.RxInvalid != 0 {
		t.Fatalf("receiver stats %+v, want %d chained", st, chained)
	}
	if st := a.port.Stats(); st.TxChained != 4 { // frames over 4096 bytes
		t.Fatalf("transmitter stats %+v, want 4 chained", st)
	}

	// One byte over MaxFrame is refused before anything is reserved.
	if err := a.port.Transmit([][]byte{make([]byte, 9019)}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("9019-byte frame: %v, want ErrTooLarge", err)
	}
}

// TestXSKSegmentsEqualConcatenation sends one frame whole and once in three
// segments: the wire must carry the same bytes.
func TestXSKSegmentsEqualConcatenation(t *testing.T) {
	_, a, b := xskPair(t, harness.Config{}, xskOptions{mode: loader.AttachDriver})
	f := roceFrame(t, a.host, b.host, 1, pattern(1000, 9))
	if err := a.port.Transmit([][]byte{f}); err != nil {
		t.Fatal(err)
	}
	if err := a.port.Transmit([][]byte{f[:54], f[54 : len(f)-4], f[len(f)-4:]}); err != nil {
		t.Fatal(err)
	}
	if err := a.port.Flush(); err != nil {
		t.Fatal(err)
	}
	got := receive(t, b.port, 2)
	if !bytes.Equal(got[0], f) || !bytes.Equal(got[1], got[0]) {
		t.Fatalf("whole %x\nsegments %x\nwant %x", got[0], got[1], f)
	}
}

func TestXSKSingleBufferCapsMaxFrame(t *testing.T) {
	_, a, _ := xskPair(t, harness.Config{MTU: 9000}, xskOptions{mode: loader.AttachGeneric})
	// One 4096-byte chunk less the kernel's 256 bytes of headroom.
	if got := a.port.MaxFrame(); got != 4096-256 {
		t.Fatalf("MaxFrame %d on a single-buffer socket, want 3840", got)
	}
	if err := a.port.Transmit([][]byte{make([]byte, 3841)}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("3841-byte frame: %v, want ErrTooLarge", err)
	}
	if err := a.port.Transmit(nil); !errors.Is(err, ErrEmptyFrame) {
		t.Fatalf("empty frame: %v, want ErrEmptyFrame", err)
	}
}

func TestXSKTxFullWithoutFlush(t *testing.T) {
	for _, tc := range []struct {
		name  string
		o     xskOptions
		limit int
	}{
		{"TX ring", xskOptions{mode: loader.AttachDriver, txRing: 64}, 64},
		{"TX frames", xskOptions{mode: loader.AttachDriver, cfg: XSKConfig{TxFrames: 40}}, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, a, b := xskPair(t, harness.Config{}, tc.o)
			f := roceFrame(t, a.host, b.host, 0, pattern(100, 1))
			for i := range tc.limit {
				if err := a.port.Transmit([][]byte{f}); err != nil {
					t.Fatalf("frame %d of %d: %v", i, tc.limit, err)
				}
			}
			if err := a.port.Transmit([][]byte{f}); !errors.Is(err, ErrTxFull) {
				t.Fatalf("frame %d: %v, want ErrTxFull", tc.limit, err)
			}
			if err := a.port.Flush(); err != nil {
				t.Fatal(err)
			}
			if st := a.port.Stats(); st.TxFull != 1 || st.TxFrames != uint64(tc.limit) {
				t.Fatalf("stats %+v", st)
			}
			receive(t, b.port, tc.limit)
			// Copy mode transmits within the kick, so the flush freed
			// everything: a full batch fits again.
			for i := range tc.limit {
				if err := a.port.Transmit([][]byte{f}); err != nil {
					t.Fatalf("after Flush, frame %d: %v", i, err)
				}
			}
			if err := a.port.Flush(); err != nil {
				t.Fatal(err)
			}
			receive(t, b.port, tc.limit)
		})
	}
}

func TestXSKWait(t *testing.T) {
	_, a, b := xskPair(t, harness.Config{}, xskOptions{mode: loader.AttachDriver})
	f := roceFrame(t, a.host, b.host, 0, pattern(64, 2))

	start := time.Now()
	if err := b.port.Wait(30 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("idle Wait returned after %v, before its timeout", d)
	}

	// A Doorbell while the engine is awake costs no syscall, and the next
	// Wait returns at once.
	b.port.Doorbell()
	b.port.Doorbell()
	if st := b.port.Stats(); st.Doorbells != 0 {
		t.Fatalf("a doorbell for an awake engine wrote the eventfd: %+v", st)
	}
	start = time.Now()
	polled := b.port.Stats().WaitPolled
	if err := b.port.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second || b.port.Stats().WaitPolled != polled {
		t.Fatalf("Wait after Doorbell took %v and polled %d times", d, b.port.Stats().WaitPolled-polled)
	}

	for _, tc := range []struct {
		name string
		wake func()
		want func(XSKStats) bool
	}{
		{"frame", func() {
			if err := a.port.Transmit([][]byte{f}); err != nil {
				t.Error(err)
			}
			if err := a.port.Flush(); err != nil {
				t.Error(err)
			}
		}, func(s XSKStats) bool { return s.WaitWakes == 0 }},
		{"doorbell", b.port.Doorbell, func(s XSKStats) bool { return s.Doorbells == 1 && s.WaitWakes == 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			woke := make(chan time.Duration)
			go func() { // the engine, for this test
				start := time.Now()
				if err := b.port.Wait(10 * time.Second); err != nil {
					t.Error(err)
				}
				woke <- time.Since(start)
			}()
			time.Sleep(50 * time.Millisecond) // let it block in ppoll
			var wg sync.WaitGroup
			wg.Go(tc.wake) // from yet another goroutine
			wg.Wait()
			select {
			case d := <-woke:
				if d < 50*time.Millisecond || d > 5*time.Second {
					t.Fatalf("Wait returned after %v", d)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("Wait did not return")
			}
			if st := b.port.Stats(); !tc.want(st) {
				t.Fatalf("stats %+v", st)
			}
			if tc.name == "frame" {
				if got := receive(t, b.port, 1); !sameFrame(got[0], f) {
					t.Fatalf("woke for %x, sent %x", got[0], f)
				}
			}
		})
	}
}

func TestXSKNoLostWakeups(t *testing.T) {
	_, _, b := xskPair(t, harness.Config{}, xskOptions{mode: loader.AttachDriver})
	checkNoLostWakeups(t, b.port, 5000)
	if st := b.port.Stats(); st.Doorbells == 0 || st.WaitWakes == 0 {
		t.Fatalf("no wake-up went through the eventfd, so the sleeping path was not tested: %+v", st)
	}
	t.Logf("%+v", b.port.Stats())
}

// TestXSKDataPathAllocatesNothing covers Transmit, Flush, Receive, Release,
// Doorbell and Wait, on single frames and on chains.
func TestXSKDataPathAllocatesNothing(t *testing.T) {
	_, a, b := xskPair(t, harness.Config{MTU: 9000}, xskOptions{mode: loader.AttachDriver, multi: true})
	small := roceFrame(t, a.host, b.host, 0, pattern(1000, 4))
	jumbo := roceFrame(t, a.host, b.host, 1, pattern(8000, 5))
	smallSegs := split(small, 54, len(small)-4)
	jumboSegs := split(jumbo, 54, len(jumbo)-4)
	out := make([][]byte, 16)
	received := 0
	step := func() {
		for _, segs := range [][][]byte{smallSegs, smallSegs, jumboSegs} {
			if err := a.port.Transmit(segs); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.port.Flush(); err != nil {
			t.Fatal(err)
		}
		b.port.Doorbell()
		if err := b.port.Wait(time.Millisecond); err != nil {
			t.Fatal(err)
		}
		for range 100 { // bounded: the frames are usually there at once
			received += b.port.Receive(out)
			b.port.Release()
			if b.port.Wait(time.Millisecond) != nil {
				break
			}
			if b.port.Stats().RxFrames%3 == 0 {
				break
			}
		}
	}
	for range 50 {
		step()
	}
	if n := testing.AllocsPerRun(200, step); n != 0 {
		t.Fatalf("%v allocations per round", n)
	}
	if st := b.port.Stats(); st.RxChained == 0 || st.RxFrames < 3*250*9/10 {
		t.Fatalf("the rounds moved too little to prove anything: %+v", st)
	}
}

// countFDs counts the process's descriptors after letting finalizers close
// what earlier rounds dropped.
func countFDs(t testing.TB) int {
	t.Helper()
	runtime.GC()
	runtime.GC()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// fdTarget is what descriptor fd refers to, or "" if it is closed.
func fdTarget(fd int) string {
	s, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	return s
}

func TestXSKCloseLeaksNoFDs(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{})
	before := countFDs(t)
	for i := range 3 {
		e := openXSK(t, p.A, xskOptions{mode: loader.AttachDriver})
		sockFD, efd := e.port.Socket().FD(), e.port.efd
		if !strings.HasPrefix(fdTarget(sockFD), "socket:") || !strings.Contains(fdTarget(efd), "eventfd") {
			t.Fatalf("socket fd %d is %q, doorbell fd %d is %q", sockFD, fdTarget(sockFD), efd, fdTarget(efd))
		}
		doorbell := e.port // a doorbell racing Close must not touch a closed fd
		var wg sync.WaitGroup
		wg.Go(func() {
			for range 1000 {
				doorbell.Doorbell()
			}
		})
		if err := e.port.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if err := e.port.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if s, d := fdTarget(sockFD), fdTarget(efd); s != "" || d != "" {
			t.Fatalf("round %d: after Close the socket fd is %q and the doorbell fd %q, want both closed", i, s, d)
		}
		for name, err := range map[string]error{
			"Transmit": e.port.Transmit([][]byte{{1}}),
			"Flush":    e.port.Flush(),
			"Wait":     e.port.Wait(time.Second),
		} {
			if !errors.Is(err, ErrClosed) {
				t.Errorf("%s after Close: %v, want ErrClosed", name, err)
			}
		}
		if n := e.port.Receive(make([][]byte, 4)); n != 0 {
			t.Errorf("Receive after Close returned %d", n)
		}
		e.close()
	}
	if after := countFDs(t); after != before {
		t.Fatalf("%d fds before, %d after three open/close rounds", before, after)
	}
}

func TestNewXSKRejectsBadConfig(t *testing.T) {
	testenv.RequireRoot(t)
	p := harness.New(t, harness.Config{})
	var umem *afxdp.UMEM
	var sock *afxdp.Socket
	err := p.A.Do(func() error {
		var err error
		if umem, err = afxdp.NewUMEM(afxdp.UMEMConfig{NumFrames: 8192}); err != nil {
			return err
		}
		sock, err = afxdp.NewSocket(umem, afxdp.SocketConfig{Ifindex: p.A.Ifindex})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { umem.Close() })
	frames := umem.Allocator()
	slots, err := NewTxSlots(4096)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, -4096, 4095, 6000} {
		if _, err := NewTxSlots(n); err == nil {
			t.Errorf("NewTxSlots(%d) succeeded", n)
		}
	}
	for _, tc := range []struct {
		cfg  XSKConfig
		want string
	}{
		{XSKConfig{MTU: -1}, "negative"},
		{XSKConfig{Scratch: -1}, "negative"},
		{XSKConfig{RxFrames: 8192}, "no frames left to transmit"},
		{XSKConfig{RxFrames: 5000, TxFrames: 5000}, "exceed the allocator's 8192 free frames"},
		{XSKConfig{RxFrames: 100, TxFrames: 3000}, "exceed the completion ring's 2048 entries"},
		{XSKConfig{TxReference: [2]uint64{4096, 8192}}, "overlaps the port's frames"},
		{XSKConfig{TxReference: [2]uint64{8192, 4096}}, "is not a range inside"},
		{XSKConfig{TxReference: [2]uint64{0, 1 << 40}}, "is not a range inside"},
		{XSKConfig{TxSlots: slots}, "TxSlots without a TxReference range"},
	} {
		x, err := NewXSK(sock, frames, tc.cfg)
		if err == nil {
			x.Close()
			t.Fatalf("NewXSK(%+v) succeeded", tc.cfg)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewXSK(%+v): %v, want it to say %q", tc.cfg, err, tc.want)
		}
	}
	if frames.Available() != 8192 {
		t.Fatalf("rejected configurations took %d frames", 8192-frames.Available())
	}
	if _, err := NewXSK(nil, frames, XSKConfig{}); err == nil {
		t.Fatal("NewXSK(nil socket) succeeded")
	}
	// Defaults: half the frames for RX, the rest up to the completion
	// ring's size for TX.
	x, err := NewXSK(sock, frames, XSKConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if x.rxBudget != 4096 || x.txBudget != 2048 || x.rxLent != 2048 || frames.Available() != 8192-2048 {
		t.Fatalf("budgets rx %d tx %d, lent %d, %d frames left", x.rxBudget, x.txBudget, x.rxLent, frames.Available())
	}
}

// close releases what openXSK opened, ahead of the test's cleanup.
func (e *xskEnd) close() {
	e.port.Close()
	e.umem.Close()
	e.xdp.Close()
	e.port, e.umem, e.xdp = nil, nil, nil
}

// BenchmarkXSK measures frames/s from one XSK to another over the veth
// pair: Transmit+Flush on one goroutine, Receive+Release (sleeping in Wait
// when idle) on another. It reports the rate as a ratio to raw AF_XDP
// (package baseline: pre-built frames, busy polling) on the same pair.
func BenchmarkXSK(b *testing.B) {
	raw := map[int]float64{} // raw AF_XDP frames/s by frame size, measured once
	for _, size := range []int{64, 1500} {
		b.Run(fmt.Sprintf("frame=%d", size), func(b *testing.B) {
			p, tx, rx := xskPair(b, harness.Config{}, xskOptions{mode: loader.AttachDriver})
			f, err := baseline.RoCEFrame(tx.host, rx.host, testQPN, size)
			if err != nil {
				b.Fatal(err)
			}
			segs := [][]byte{f}
			var received int
			var last time.Time // when the last frame arrived
			done := make(chan struct{})
			b.ReportAllocs()
			b.SetBytes(int64(len(f)))
			b.ResetTimer()
			start := time.Now()
			go func() {
				defer close(done)
				out := make([][]byte, 64)
				last = time.Now()
				// Frames lost on the way never come: stop after 200ms
				// without one.
				for received < b.N && time.Since(last) < 200*time.Millisecond {
					n := rx.port.Receive(out)
					received += n
					if n > 0 {
						last = time.Now()
					} else {
						_ = rx.port.Wait(time.Millisecond)
					}
				}
				rx.port.Release()
			}()
			for i := 0; i < b.N; {
				switch err := tx.port.Transmit(segs); {
				case err == nil:
					i++
					if i%32 == 0 {
						_ = tx.port.Flush()
					}
				case errors.Is(err, ErrTxFull):
					_ = tx.port.Flush()
				default:
					b.Fatal(err)
				}
			}
			_ = tx.port.Flush()
			<-done
			b.StopTimer()
			rate := float64(received) / last.Sub(start).Seconds()
			b.ReportMetric(rate, "frames/s")
			b.ReportMetric(float64(b.N-received)/float64(b.N)*100, "%lost")
			if raw[size] == 0 {
				tx.close()
				rx.close()
				r, err := baseline.XDPRate(p, len(f), time.Second)
				if err != nil {
					b.Fatal(err)
				}
				raw[size] = r.PerSecond()
			}
			b.ReportMetric(rate/raw[size], "xsk/raw-af_xdp")
		})
	}
}

// TestXSKTransmitReferencesInPlace sends frames whose payload lies in the
// TxReference range: the payload must leave from where it is (bytes
// changed after Transmit and before Flush are the ones on the wire), a
// payload crossing a chunk boundary must arrive whole, small segments and
// memory outside the range are copied, every frame of the port comes back
// once the kernel completed, and none of it allocates.
func TestXSKTransmitReferencesInPlace(t *testing.T) {
	_, a, b := xskPair(t, harness.Config{MTU: 9000}, xskOptions{mode: loader.AttachDriver, multi: true, ref: true})
	avail := a.port.frames.Available()
	const payloadLen = 8000
	f := roceFrame(t, a.host, b.host, 7, pattern(payloadLen, 3))
	hl := len(f) - payloadLen - rocev2.ICRCLen
	// The payload starts 100 bytes before a chunk boundary of the
	// reference range: three descriptors of 100, 4096 and 3804 bytes.
	payload := a.ref[4096-100 : 4096-100+payloadLen]
	copy(payload, f[hl:hl+payloadLen])
	segs := [][]byte{f[:hl], payload, f[hl+payloadLen:]}
	if err := a.port.Transmit(segs); err != nil {
		t.Fatal(err)
	}
	// Referenced, not copied: what the memory holds at Flush is sent.
	payload[0] ^= 0xff
	if err := a.port.Flush(); err != nil {
		t.Fatal(err)
	}
	got := receive(t, b.port, 1)[0]
	want := bytes.Clone(f)
	want[hl] ^= 0xff
	if !bytes.Equal(got, want) {
		t.Fatalf("received %d bytes, not the %d-byte frame with its payload read in place", len(got), len(want))
	}
	payload[0] ^= 0xff
	st := a.port.Stats()
	if st.TxRefFrames != 1 || st.TxRefBytes != payloadLen || st.TxChained != 1 {
		t.Fatalf("stats %+v, want one chained frame with %d referenced bytes", st, payloadLen)
	}

	// Copied: a segment under MinTxReference, and one outside the range
	// (the Go heap).
	small := roceFrame(t, a.host, b.host, 8, pattern(MinTxReference-1, 5))
	shl := len(small) - (MinTxReference - 1) - rocev2.ICRCLen
	sp := a.ref[:MinTxReference-1]
	copy(sp, small[shl:])
	for _, segs := range [][][]byte{{small[:shl], sp, small[len(small)-rocev2.ICRCLen:]}, {f[:hl], f[hl : hl+payloadLen], f[hl+payloadLen:]}} {
		if err := a.port.Transmit(segs); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.port.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, b.port, 2); !bytes.Equal(got[0], small) || !bytes.Equal(got[1], f) {
		t.Fatal("copied frames arrived changed")
	}
	if st := a.port.Stats(); st.TxRefFrames != 1 || st.TxFrames != 3 {
		t.Fatalf("stats %+v: only the first frame references memory", st)
	}

	step := func() {
		if err := a.port.Transmit(segs); err != nil {
			t.Fatal(err)
		}
		if err := a.port.Flush(); err != nil {
			t.Fatal(err)
		}
		var rx [4][]byte
		for i := 0; i < 1000; i++ { // bounded: the frame is usually there at once
			if b.port.Receive(rx[:]) > 0 {
				break
			}
			if err := b.port.Wait(time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		b.port.Release()
	}
	if n := testing.AllocsPerRun(100, step); n != 0 {
		t.Fatalf("%v allocations per referenced frame", n)
	}
	if err := a.port.Flush(); err != nil {
		t.Fatal(err)
	}
	// Copy mode completes within the kick: every TX frame is back.
	if a.port.txOut != 0 || a.port.txInFlight != 0 || a.port.frames.Available() != avail {
		t.Fatalf("after completion %d frames and %d descriptors out, %d of %d frames free",
			a.port.txOut, a.port.txInFlight, a.port.frames.Available(), avail)
	}
}

// TestXSKSingleBufferCopiesReferences checks that a socket without
// multi-buffer, which cannot send chains, copies even TxReference bytes.
func TestXSKSingleBufferCopiesReferences(t *testing.T) {
	_, a, b := xskPair(t, harness.Config{}, xskOptions{mode: loader.AttachDriver, ref: true})
	f := roceFrame(t, a.host, b.host, 1, pattern(1400, 9))
	hl := len(f) - 1400 - rocev2.ICRCLen
	p := a.ref[:1400]
	copy(p, f[hl:])
	if err := a.port.Transmit([][]byte{f[:hl], p, f[len(f)-rocev2.ICRCLen:]}); err != nil {
		t.Fatal(err)
	}
	p[0] ^= 0xff // copied already: the wire keeps the old byte
	if err := a.port.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, b.port, 1); !bytes.Equal(got[0], f) {
		t.Fatal("frame arrived changed")
	}
	if st := a.port.Stats(); st.TxRefFrames != 0 || st.TxChained != 0 {
		t.Fatalf("stats %+v, want nothing referenced", st)
	}
}

// TestXSKJoinsChainsInPlace receives 4 KiB-MTU RoCE frames (two
// descriptors each) and 9000-byte ones (three): with the fill ring lent
// frames in UMEM order, every chain is joined where it lies and none is
// gathered; with frames lent out of order, every chain is gathered. Both
// deliver the frames intact, and the order holds across refills.
func TestXSKJoinsChainsInPlace(t *testing.T) {
	for _, scatter := range []bool{false, true} {
		t.Run(fmt.Sprintf("scatter=%v", scatter), func(t *testing.T) {
			_, a, b := xskPair(t, harness.Config{MTU: 9000}, xskOptions{mode: loader.AttachDriver, multi: true, cfg: XSKConfig{RxFrames: 512}})
			b.close()
			b = openXSK(t, b.host, xskOptions{mode: loader.AttachDriver, multi: true, scatter: scatter, cfg: XSKConfig{RxFrames: 512}})
			const rounds, perRound = 4, 64 // 4 x 64 frames of up to 3 chunks: the 512 lent frames go round
			for r := range rounds {
				var want [][]byte
				for i := range perRound {
					size := 4096
					if i%5 == 0 {
						size = 8000
					}
					f := roceFrame(t, a.host, b.host, r*perRound+i, pattern(size, byte(r+i)))
					want = append(want, f)
					if err := a.port.Transmit([][]byte{f}); err != nil {
						t.Fatal(err)
					}
				}
				if err := a.port.Flush(); err != nil {
					t.Fatal(err)
				}
				got := receive(t, b.port, perRound)
				for i := range want {
					if !bytes.Equal(got[i], want[i]) {
						t.Fatalf("round %d frame %d: %d bytes received differ from the %d sent", r, i, len(got[i]), len(want[i]))
					}
				}
			}
			st := b.port.Stats()
			if st.RxChained != rounds*perRound || st.RxInvalid != 0 {
				t.Fatalf("stats %+v: want %d chains", st, rounds*perRound)
			}
			// In order, only a chain that straddles the wrap from the last
			// lent frame to the first is gathered: 564 descriptors go once
			// round the 512 frames.
			if gathered := st.RxChained - st.RxJoined; (!scatter && gathered > 1) || (scatter && st.RxJoined != 0) {
				t.Fatalf("stats %+v: %d chains gathered, %d joined", st, gathered, st.RxJoined)
			}
		})
	}
}

// TestXSKWaitDoorbell: a frame does not end WaitDoorbell (it stays in the
// ring for a consumer's turn), its doorbell does, and the next Wait still
// sees the frame (rc.PollProgress naps its engine so).
func TestXSKWaitDoorbell(t *testing.T) {
	_, a, b := xskPair(t, harness.Config{}, xskOptions{mode: loader.AttachDriver})
	f := roceFrame(t, a.host, b.host, 0, pattern(64, 3))
	if err := a.port.Transmit([][]byte{f}); err != nil {
		t.Fatal(err)
	}
	if err := a.port.Flush(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := b.port.WaitDoorbell(50 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("WaitDoorbell returned after %v with a frame waiting: the frame ended it", d)
	}
	woke := make(chan time.Duration)
	go func() {
		start := time.Now()
		if err := b.port.WaitDoorbell(10 * time.Second); err != nil {
			t.Error(err)
		}
		woke <- time.Since(start)
	}()
	time.Sleep(50 * time.Millisecond) // let it block in ppoll
	b.port.Doorbell()
	select {
	case d := <-woke:
		if d > 5*time.Second {
			t.Fatalf("WaitDoorbell returned after %v", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the doorbell did not end WaitDoorbell")
	}
	start = time.Now()
	if err := b.port.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Wait with a frame waiting took %v", d)
	}
	if got := receive(t, b.port, 1); !sameFrame(got[0], f) {
		t.Fatalf("received %x, sent %x", got[0], f)
	}
}

// TestXSKNapHoldsNoP: WaitDoorbell with nothing watched parks in the
// runtime rather than blocking in a system call, which would keep its P
// from the goroutines that are to run the engine's turns until the
// runtime's monitor took it back (rc.PollProgress naps its engine so); a
// doorbell ends the nap, an eventfd being watched is still seen (it needs
// ppoll), and Close ends a nap that has no timeout.
func TestXSKNapHoldsNoP(t *testing.T) {
	_, _, b := xskPair(t, harness.Config{}, xskOptions{mode: loader.AttachDriver})
	ended := func(what string, woke <-chan time.Duration, within time.Duration) time.Duration {
		t.Helper()
		select {
		case d := <-woke:
			return d
		case <-time.After(within):
			t.Fatalf("%s did not end the nap within %v", what, within)
			return 0
		}
	}
	nap := func(timeout time.Duration, want error) <-chan time.Duration {
		woke := make(chan time.Duration, 1)
		go func() {
			start := time.Now()
			if err := b.port.WaitDoorbell(timeout); !errors.Is(err, want) {
				t.Errorf("WaitDoorbell: %v, want %v", err, want)
			}
			woke <- time.Since(start)
		}()
		return woke
	}

	base := testenv.InSystemCalls(t)
	woke := nap(10*time.Second, nil)
	time.Sleep(20 * time.Millisecond) // let it park
	samples, seen := testenv.SystemCallSamples(t, base, 200*time.Millisecond)
	b.port.Doorbell()
	if d := ended("the doorbell", woke, 5*time.Second); d < 200*time.Millisecond {
		t.Fatalf("the nap ended after %v, before its doorbell", d)
	}
	// Blocked in ppoll, the napper is in a system call in every sample;
	// another goroutine of the test binary may be, now and then.
	if seen > samples/10 {
		t.Fatalf("%d of %d samples saw a goroutine in a system call while one napped (none before)", seen, samples)
	}

	if d := ended("its timeout", nap(30*time.Millisecond, nil), 5*time.Second); d < 30*time.Millisecond {
		t.Fatalf("a nap of 30ms ended after %v", d)
	}
	if n := testing.AllocsPerRun(10, func() { _ = b.port.WaitDoorbell(time.Millisecond) }); n != 0 {
		t.Fatalf("a nap allocates %.1f times", n)
	}

	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	b.port.Watch(efd)
	woke = nap(10*time.Second, nil)
	time.Sleep(20 * time.Millisecond)
	if _, err := unix.Write(efd, []byte{1, 0, 0, 0, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	ended("a watched eventfd", woke, 5*time.Second)
	b.port.Unwatch(efd)

	woke = nap(-1, ErrClosed)
	time.Sleep(20 * time.Millisecond)
	if err := b.port.Close(); err != nil {
		t.Fatal(err)
	}
	ended("Close", woke, 5*time.Second)
}
