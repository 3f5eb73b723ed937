package afxdp

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/test/harness"
)

// These tests need root: each builds its own veth pair inside fresh network
// namespaces (test/harness). veth offers AF_XDP in copy mode only.

// openOn creates a UMEM and sockets on host h; the sockets belong to h's
// namespace and keep working from the test goroutine.
func openOn(t *testing.T, h *harness.Host, ucfg UMEMConfig, cfgs ...SocketConfig) (*UMEM, []*Socket) {
	t.Helper()
	var u *UMEM
	var socks []*Socket
	err := h.Do(func() error {
		var err error
		u, err = NewUMEM(ucfg)
		if err != nil {
			return err
		}
		for _, c := range cfgs {
			if c.Ifindex == 0 {
				c.Ifindex = h.Ifindex
			}
			s, err := NewSocket(u, c)
			if err != nil {
				u.Close()
				return err
			}
			socks = append(socks, s)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	return u, socks
}

func TestSocketBindsCopyModeOnVeth(t *testing.T) {
	p := harness.New(t, harness.Config{})

	// Forcing zero-copy on veth fails, naming the queue and device, and
	// leaves the queue free.
	err := p.A.Do(func() error {
		u, err := NewUMEM(UMEMConfig{NumFrames: 64})
		if err != nil {
			return err
		}
		defer u.Close()
		zs, err := NewSocket(u, SocketConfig{Ifindex: p.A.Ifindex, Queue: 0, Mode: ModeZeroCopy})
		if err == nil {
			mode := zs.Mode()
			zs.Close()
			if mode != ModeZeroCopy {
				return fmt.Errorf("ModeZeroCopy bound in %v mode without an error", mode)
			}
			return nil // a veth that learned zero-copy is fine too
		}
		if want := fmt.Sprintf("queue 0 of ifindex %d", p.A.Ifindex); !strings.Contains(err.Error(), want) || !errors.Is(err, unix.EOPNOTSUPP) {
			return fmt.Errorf("error %q: want EOPNOTSUPP naming %q", err, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	_, socks := openOn(t, p.A, UMEMConfig{NumFrames: 64}, SocketConfig{Queue: 0})
	s := socks[0]
	if s.Mode() != ModeCopy {
		t.Fatalf("Mode() = %v on veth, want copy", s.Mode())
	}
	if s.FD() <= 0 || s.Queue() != 0 || s.Ifindex() != p.A.Ifindex {
		t.Fatalf("socket reports fd %d queue %d ifindex %d", s.FD(), s.Queue(), s.Ifindex())
	}
	// The kernel sets TX need-wakeup from the start (xsk_setsockopt), and
	// our rings read the kernel's flags word.
	if !s.TX().NeedWakeup() {
		t.Fatal("TX ring does not report the kernel's initial need-wakeup flag")
	}
	if s.Fill().Size() != DefaultRingSize || s.RX().Size() != DefaultRingSize {
		t.Fatalf("ring sizes fill %d RX %d, want %d", s.Fill().Size(), s.RX().Size(), DefaultRingSize)
	}

	// A second UMEM cannot take a queue a live socket holds.
	err = p.A.Do(func() error {
		u, err := NewUMEM(UMEMConfig{NumFrames: 64})
		if err != nil {
			return err
		}
		defer u.Close()
		_, err = NewSocket(u, SocketConfig{Ifindex: p.A.Ifindex, Queue: 0})
		if !errors.Is(err, unix.EBUSY) || !strings.Contains(err.Error(), "queue busy") {
			return fmt.Errorf("bind to a held queue: %v, want EBUSY saying the queue is busy", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestSocketBadIfindex(t *testing.T) {
	p := harness.New(t, harness.Config{})
	err := p.A.Do(func() error {
		u, err := NewUMEM(UMEMConfig{NumFrames: 64})
		if err != nil {
			return err
		}
		defer u.Close()
		_, err = NewSocket(u, SocketConfig{Ifindex: 9999, Queue: 0})
		if !errors.Is(err, unix.ENODEV) || !strings.Contains(err.Error(), "queue 0 of ifindex 9999") || !strings.Contains(err.Error(), "bind") {
			return fmt.Errorf("bind to a missing device: %v, want ENODEV naming the queue, device and step", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestSharedUMEMAcrossQueues(t *testing.T) {
	p := harness.New(t, harness.Config{Queues: 3})
	u, socks := openOn(t, p.A, UMEMConfig{NumFrames: 256, FillRingSize: 64, CompletionRingSize: 64},
		SocketConfig{Queue: 0, RxRingSize: 64, TxRingSize: 64},
		SocketConfig{Queue: 1, RxRingSize: 64, TxRingSize: 64})
	s0, s1 := socks[0], socks[1]
	if s0.Mode() != ModeCopy || s1.Mode() != ModeCopy {
		t.Fatalf("modes %v and %v, want copy for both", s0.Mode(), s1.Mode())
	}
	// Each queue has its own fill and completion rings.
	if &s0.Fill().entries[0] == &s1.Fill().entries[0] || &s0.Completion().entries[0] == &s1.Completion().entries[0] {
		t.Fatal("the two queues share a fill or completion ring")
	}
	parts, err := u.Partition(2)
	if err != nil {
		t.Fatal(err)
	}
	if n := s0.Fill().FillFrom(parts[0], 64); n != 64 {
		t.Fatalf("filled %d frames on queue 0, want 64", n)
	}
	if n := s1.Fill().FillFrom(parts[1], 64); n != 64 {
		t.Fatalf("filled %d frames on queue 1, want 64", n)
	}
	if s0.Fill().Pending() != 64 || s1.Fill().Pending() != 64 {
		t.Fatal("fill entries not visible to the kernel")
	}

	err = p.A.Do(func() error {
		if _, err := NewSocket(u, SocketConfig{Ifindex: p.A.Ifindex, Queue: 1}); err == nil || !strings.Contains(err.Error(), "already has a socket") {
			return fmt.Errorf("second socket on queue 1: %v, want a clear refusal", err)
		}
		if _, err := NewSocket(u, SocketConfig{Ifindex: p.A.Ifindex, Queue: 2, MultiBuffer: true}); err == nil || !strings.Contains(err.Error(), "multi-buffer") {
			return fmt.Errorf("sharing with different multi-buffer setting: %v, want a clear refusal", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// The UMEM stays shareable after its registering socket closes.
	if err := s0.Close(); err != nil {
		t.Fatal(err)
	}
	err = p.A.Do(func() error {
		s, err := NewSocket(u, SocketConfig{Ifindex: p.A.Ifindex, Queue: 0, RxRingSize: 64, TxRingSize: 64})
		if err != nil {
			return fmt.Errorf("re-open queue 0 through the remaining socket: %w", err)
		}
		return s.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestMultiBufferBindAndTransmitChain(t *testing.T) {
	p := harness.New(t, harness.Config{MTU: 9000})
	u, socks := openOn(t, p.A, UMEMConfig{NumFrames: 64}, SocketConfig{Queue: 0, MultiBuffer: true})
	s := socks[0]
	if !s.MultiBuffer() || s.Mode() != ModeCopy {
		t.Fatalf("multi-buffer %v mode %v, want true, copy", s.MultiBuffer(), s.Mode())
	}
	rx := openPacketSocket(t, p.B)

	// A 7000-byte frame: more than one 4096-byte chunk, so it must leave as
	// a chain of descriptors.
	frame := testFrame(p.B.MAC, p.A.MAC, 7000, 1)
	var frags []Desc
	for off := 0; off < len(frame); off += 3000 {
		addr, ok := u.Alloc()
		if !ok {
			t.Fatal("out of frames")
		}
		n := copy(u.Frame(addr), frame[off:min(off+3000, len(frame))])
		frags = append(frags, Desc{Addr: addr, Len: uint32(n)})
	}
	i, got := s.TX().Reserve(uint32(len(frags)))
	if got != uint32(len(frags)) {
		t.Fatalf("reserved %d of %d", got, len(frags))
	}
	s.TX().SetPacket(i, frags)
	s.TX().Submit()
	if err := s.Kick(); err != nil {
		t.Fatal(err)
	}
	gotFrame := recvFrame(t, rx, time.Second)
	if !bytes.Equal(gotFrame, frame) {
		t.Fatalf("peer received %d bytes, want the %d-byte chained frame byte for byte", len(gotFrame), len(frame))
	}
	waitCompletions(t, s, u.Allocator(), uint32(len(frags)))
}

func TestTransmitReachesPeer(t *testing.T) {
	p := harness.New(t, harness.Config{})
	const count = 100 // more than copy mode's 32 per sendto
	u, socks := openOn(t, p.A, UMEMConfig{NumFrames: 256}, SocketConfig{Queue: 0, TxRingSize: 128})
	s := socks[0]
	rx := openPacketSocket(t, p.B)

	want := make([][]byte, count)
	i, got := s.TX().Reserve(count)
	if got != count {
		t.Fatalf("reserved %d of %d", got, count)
	}
	for j := range want {
		want[j] = testFrame(p.B.MAC, p.A.MAC, 60+j*13, uint32(j))
		addr, _ := u.Alloc()
		n := copy(u.Frame(addr), want[j])
		s.TX().Set(i+uint32(j), Desc{Addr: addr, Len: uint32(n)})
	}
	s.TX().Submit()
	if err := s.Kick(); err != nil {
		t.Fatal(err)
	}
	if p := s.TX().Pending(); p != 0 {
		t.Fatalf("%d descriptors still pending after Kick", p)
	}
	for j := range want {
		gotFrame := recvFrame(t, rx, time.Second)
		if !bytes.Equal(gotFrame, want[j]) {
			t.Fatalf("frame %d: peer received % x, want % x", j, head(gotFrame), head(want[j]))
		}
	}
	waitCompletions(t, s, u.Allocator(), count)
	if u.Allocator().Available() != u.NumFrames() {
		t.Fatalf("%d of %d frames back after all completions", u.Allocator().Available(), u.NumFrames())
	}

	// The per-packet transmit path, syscall included, allocates nothing.
	frame := testFrame(p.B.MAC, p.A.MAC, 64, 0)
	var kickErr error
	allocs := testing.AllocsPerRun(50, func() {
		addr, ok := u.Alloc()
		if !ok {
			return
		}
		copy(u.Frame(addr), frame)
		if i, got := s.TX().Reserve(1); got == 1 {
			s.TX().Set(i, Desc{Addr: addr, Len: uint32(len(frame))})
			s.TX().Submit()
		}
		if err := s.Kick(); err != nil {
			kickErr = err
		}
		_, _ = s.Completion().ReclaimTo(u.Allocator(), 64)
	})
	if kickErr != nil {
		t.Fatal(kickErr)
	}
	if allocs != 0 {
		t.Fatalf("transmit path: %v allocations per frame, want 0", allocs)
	}
}

func TestStatistics(t *testing.T) {
	p := harness.New(t, harness.Config{})
	u, socks := openOn(t, p.A, UMEMConfig{NumFrames: 64}, SocketConfig{Queue: 0})
	s := socks[0]
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if !st.Extended {
		t.Fatal("kernel did not return the extended statistics (Linux 5.9+)")
	}
	if st != (Statistics{Extended: true}) {
		t.Fatalf("fresh socket has counters %+v", st)
	}
	// A descriptor outside the UMEM is counted as invalid and skipped.
	i, _ := s.TX().Reserve(1)
	s.TX().Set(i, Desc{Addr: uint64(len(u.Bytes())) + 4096, Len: 64})
	s.TX().Submit()
	if err := s.Kick(); err != nil {
		t.Fatal(err)
	}
	st, err = s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.TxInvalidDescs != 1 {
		t.Fatalf("TxInvalidDescs = %d after one bad descriptor, want 1 (%+v)", st.TxInvalidDescs, st)
	}
}

func TestBusyPollOptions(t *testing.T) {
	p := harness.New(t, harness.Config{})
	_, socks := openOn(t, p.A, UMEMConfig{NumFrames: 64}, SocketConfig{
		Queue:    0,
		BusyPoll: &BusyPollConfig{Timeout: 50 * time.Microsecond, Budget: 16, Prefer: true},
	})
	s := socks[0]
	// SO_BUSY_POLL_BUDGET cannot be read back (sk_getsockopt has no case
	// for it); NewSocket fails if setting it fails.
	for _, o := range []struct {
		name string
		opt  int
		want int
	}{
		{"SO_BUSY_POLL", unix.SO_BUSY_POLL, 50},
		{"SO_PREFER_BUSY_POLL", unix.SO_PREFER_BUSY_POLL, 1},
	} {
		got, err := unix.GetsockoptInt(s.FD(), unix.SOL_SOCKET, o.opt)
		if err != nil {
			t.Fatalf("read back %s: %v", o.name, err)
		}
		if got != o.want {
			t.Fatalf("%s = %d, want %d", o.name, got, o.want)
		}
	}
	// With busy polling, WakeupRX and Poll drive the queue without error.
	if err := s.WakeupRX(); err != nil {
		t.Fatal(err)
	}
	if ready, err := s.Poll(10 * time.Millisecond); err != nil || ready {
		t.Fatalf("Poll on an idle socket = (%v, %v), want (false, nil)", ready, err)
	}
	if n := testing.AllocsPerRun(20, func() {
		_ = s.WakeupRX()
		_, _ = s.Poll(0)
	}); n != 0 {
		t.Fatalf("WakeupRX and Poll: %v allocations per call, want 0", n)
	}
}

func TestCloseReleasesEverything(t *testing.T) {
	p := harness.New(t, harness.Config{Queues: 2})
	// One open/close cycle first, so that whatever the runtime creates
	// lazily on first use (the netpoller's descriptors) is not counted.
	if u, _ := openOn(t, p.A, UMEMConfig{NumFrames: 64}, SocketConfig{Queue: 0}); u.Close() != nil {
		t.Fatal("warm-up close failed")
	}
	fdsBefore := countFDs(t)
	mapsBefore := countMaps(t)

	u, socks := openOn(t, p.A, UMEMConfig{NumFrames: 64},
		SocketConfig{Queue: 0}, SocketConfig{Queue: 1})
	base := uintptr(unsafe.Pointer(&u.Bytes()[0]))
	// A mark the UMEM alone holds: after Close the address may be taken by
	// any later mapping of the process (another test's UMEM, the heap), so
	// the check below asks whether the mark is still readable there.
	mark := make([]byte, 32)
	if _, err := rand.Read(mark); err != nil {
		t.Fatal(err)
	}
	copy(u.Bytes(), mark)
	for _, s := range socks {
		if !isSocketFD(t, s.FD()) {
			t.Fatalf("socket fd %d is not an open socket", s.FD())
		}
	}
	// Other goroutines of the test binary may hold a descriptor for a
	// moment, so counts are compared with a short settling time.
	if got := settleFDs(t, fdsBefore+2); got != fdsBefore+2 {
		t.Fatalf("%d descriptors open with two sockets, want %d", got, fdsBefore+2)
	}
	if !mapped(t, base) {
		t.Fatal("UMEM not found in /proc/self/maps")
	}
	if !holds(t, base, mark) {
		t.Fatal("the UMEM's mark is not readable through /proc/self/mem: the check after Close would prove nothing")
	}
	if got := countMaps(t); got <= mapsBefore {
		t.Fatalf("%d ring mappings with two sockets open, want more than %d: the check below would prove nothing", got, mapsBefore)
	}
	if err := socks[1].Close(); err != nil {
		t.Fatal(err)
	}
	if err := socks[1].Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := socks[1].Kick(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Kick after Close = %v, want ErrClosed", err)
	}
	if _, got := socks[1].RX().Peek(1); got != 0 {
		t.Fatal("RX ring of a closed socket reports entries")
	}
	// UMEM.Close closes the socket still open, then unmaps the UMEM.
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
	for _, s := range socks {
		if isSocketFD(t, s.FD()) {
			t.Errorf("socket fd %d still open after Close", s.FD())
		}
	}
	if got := settleFDs(t, fdsBefore); got != fdsBefore {
		t.Fatalf("%d descriptors open after Close, want %d", got, fdsBefore)
	}
	if got := countMaps(t); got != mapsBefore {
		t.Fatalf("%d ring mappings after Close, want %d", got, mapsBefore)
	}
	if holds(t, base, mark) {
		t.Fatal("UMEM still mapped after Close: its mark is readable at its address")
	}
}

// testFrame builds an Ethernet frame of n bytes with the local
// experimental EtherType 0x88b5 (IEEE 802) so no protocol stack answers it.
func testFrame(dst, src []byte, n int, seq uint32) []byte {
	f := make([]byte, n)
	copy(f[0:6], dst)
	copy(f[6:12], src)
	binary.BigEndian.PutUint16(f[12:14], 0x88b5)
	binary.BigEndian.PutUint32(f[14:18], seq)
	for i := 18; i < n; i++ {
		f[i] = byte(i*7) ^ byte(seq)
	}
	return f
}

func head(b []byte) []byte { return b[:min(len(b), 20)] }

// openPacketSocket opens an AF_PACKET socket on h's interface that sees the
// test EtherType.
func openPacketSocket(t *testing.T, h *harness.Host) int {
	t.Helper()
	proto := int(htons(0x88b5))
	var fd int
	err := h.Do(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return fmt.Errorf("open packet socket: %w", err)
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20); err != nil {
			return fmt.Errorf("size packet socket buffer: %w", err)
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: h.Ifindex})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// recvFrame returns the next frame on a packet socket, failing the test
// after timeout.
func recvFrame(t *testing.T, fd int, timeout time.Duration) []byte {
	t.Helper()
	buf := make([]byte, 10000)
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(pfd, int(timeout/time.Millisecond))
	if err != nil || n == 0 {
		t.Fatalf("no frame within %v (poll: %v)", timeout, err)
	}
	m, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:m]
}

// waitCompletions reclaims n transmitted frames, failing after a second.
func waitCompletions(t *testing.T, s *Socket, a *FrameAllocator, n uint32) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	var done uint32
	for done < n && time.Now().Before(deadline) {
		got, err := s.Completion().ReclaimTo(a, n-done)
		if err != nil {
			t.Fatalf("completion ring returned a frame not handed out: %v", err)
		}
		done += got
		if got == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if done != n {
		t.Fatalf("%d of %d completions", done, n)
	}
}

func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// settleFDs counts open descriptors until the count is want or a second
// has passed, and returns the last count.
func settleFDs(t *testing.T, want int) int {
	t.Helper()
	got := countFDs(t)
	for deadline := time.Now().Add(time.Second); got != want && time.Now().Before(deadline); got = countFDs(t) {
		time.Sleep(10 * time.Millisecond)
	}
	return got
}

// isSocketFD reports whether fd is open and names a socket. A closed
// number may be reused, but not by a socket in this test.
func isSocketFD(t *testing.T, fd int) bool {
	t.Helper()
	target, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	return err == nil && strings.HasPrefix(target, "socket:")
}

// countMaps counts mappings of socket memory (the AF_XDP rings show as
// "socket:[inode]" in /proc/self/maps). Anonymous mappings are not counted:
// the Go runtime adds those as the heap grows; the UMEM is checked by
// address instead.
func countMaps(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte(" socket:["))
}

// holds reports whether the bytes at addr are mark. It reads through
// /proc/self/mem, which fails with EIO where nothing is mapped instead of
// faulting.
func holds(t *testing.T, addr uintptr, mark []byte) bool {
	t.Helper()
	f, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, len(mark))
	if _, err := f.ReadAt(got, int64(addr)); err != nil {
		if errors.Is(err, unix.EIO) {
			return false
		}
		t.Fatalf("read /proc/self/mem at %#x: %v", addr, err)
	}
	return bytes.Equal(got, mark)
}

// mapped reports whether addr lies in any mapping of the process.
func mapped(t *testing.T, addr uintptr) bool {
	t.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lo, hi, ok := strings.Cut(strings.Fields(sc.Text())[0], "-")
		if !ok {
			continue
		}
		l, err1 := strconv.ParseUint(lo, 16, 64)
		h, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 == nil && err2 == nil && uint64(addr) >= l && uint64(addr) < h {
			return true
		}
	}
	return false
}
