package afxdp

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestFrameAllocatorNoDoubleHandOut(t *testing.T) {
	a := newFrameAllocator(2048, 0, 100)
	seen := map[uint64]bool{}
	for i := 0; i < 100; i++ {
		addr, ok := a.Alloc()
		if !ok {
			t.Fatalf("Alloc %d failed with frames left", i)
		}
		if addr%2048 != 0 || addr >= 100*2048 {
			t.Fatalf("Alloc returned %#x: not a chunk start inside the UMEM", addr)
		}
		if seen[addr] {
			t.Fatalf("frame %#x handed out twice", addr)
		}
		seen[addr] = true
	}
	if _, ok := a.Alloc(); ok {
		t.Fatal("Alloc succeeded with every frame handed out")
	}
	// Free accepts any address inside the chunk.
	if err := a.Free(5*2048 + 300); err != nil {
		t.Fatalf("Free of an address inside a held frame: %v", err)
	}
	if err := a.Free(5 * 2048); !errors.Is(err, ErrFrameNotAllocated) {
		t.Fatalf("second Free of the same frame = %v, want ErrFrameNotAllocated", err)
	}
	if addr, ok := a.Alloc(); !ok || addr != 5*2048 {
		t.Fatalf("Alloc after Free = (%#x, %v), want the freed frame", addr, ok)
	}
	if _, ok := a.Alloc(); ok {
		t.Fatal("a rejected double free put a frame on the free list")
	}
	if err := a.Free(100 * 2048); !errors.Is(err, ErrFrameOutOfRange) {
		t.Fatalf("Free past the end = %v, want ErrFrameOutOfRange", err)
	}
}

func TestUMEMConfigValidation(t *testing.T) {
	tests := []struct {
		name    string
		cfg     UMEMConfig
		wantErr string
	}{
		{"defaults", UMEMConfig{NumFrames: 16}, ""},
		{"2048-byte frames", UMEMConfig{FrameSize: 2048, NumFrames: 16}, ""},
		{"frame size 1024", UMEMConfig{FrameSize: 1024, NumFrames: 16}, "frame size 1024"},
		{"frame size 3000", UMEMConfig{FrameSize: 3000, NumFrames: 16}, "frame size 3000"},
		{"odd 2048-byte frames", UMEMConfig{FrameSize: 2048, NumFrames: 3}, "whole number"},
		{"fill ring not a power of two", UMEMConfig{NumFrames: 16, FillRingSize: 100}, "fill ring size 100"},
		{"completion ring too large", UMEMConfig{NumFrames: 16, CompletionRingSize: 1 << 30}, "completion ring size"},
		{"headroom eats the frame", UMEMConfig{NumFrames: 16, Headroom: 4096 - 256}, "headroom"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u, err := NewUMEM(tc.cfg)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("NewUMEM: %v", err)
				}
				u.Close()
				return
			}
			if err == nil {
				u.Close()
				t.Fatalf("NewUMEM accepted %+v", tc.cfg)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q does not mention %q", err, tc.wantErr)
			}
		})
	}
}

func TestUMEMMemory(t *testing.T) {
	u, err := NewUMEM(UMEMConfig{FrameSize: 2048, NumFrames: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	b := u.Bytes()
	if len(b) != 8*2048 {
		t.Fatalf("len(Bytes) = %d, want %d", len(b), 8*2048)
	}
	if p := uintptr(unsafe.Pointer(&b[0])); p%uintptr(unix.Getpagesize()) != 0 {
		t.Fatalf("UMEM at %#x is not page aligned", p)
	}
	cfg := u.Config()
	if cfg.FillRingSize != DefaultRingSize || cfg.CompletionRingSize != DefaultRingSize || u.FrameSize() != 2048 || u.NumFrames() != 8 {
		t.Fatalf("defaults not filled in: %+v", cfg)
	}

	f := u.Frame(3*2048 + 700)
	if len(f) != 2048 || cap(f) != 2048 || &f[0] != &b[3*2048] {
		t.Fatalf("Frame(3*2048+700) is not chunk 3")
	}
	if u.Frame(8*2048) != nil {
		t.Fatal("Frame past the end is not nil")
	}
	d := u.Data(Desc{Addr: 2048 + 256, Len: 100})
	if len(d) != 100 || &d[0] != &b[2048+256] {
		t.Fatal("Data does not view the descriptor's bytes")
	}
	for _, bad := range []Desc{
		{Addr: 2000, Len: 100},          // crosses into the next chunk
		{Addr: 7*2048 + 100, Len: 2048}, // runs past the end
		{Addr: 1<<64 - 10, Len: 20},     // wraps the address space
	} {
		if u.Data(bad) != nil {
			t.Fatalf("Data(%+v) is not nil", bad)
		}
	}
	if got := u.Data(Desc{Addr: 8 * 2048}); got == nil || len(got) != 0 {
		t.Fatal("an empty descriptor at the end should be an empty view")
	}
}

func TestUMEMPartition(t *testing.T) {
	u, err := NewUMEM(UMEMConfig{FrameSize: 2048, NumFrames: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if _, err := u.Partition(0); err == nil {
		t.Fatal("Partition(0) succeeded")
	}
	if _, err := u.Partition(11); err == nil {
		t.Fatal("Partition into more parts than frames succeeded")
	}
	addr, _ := u.Alloc()
	if _, err := u.Partition(2); err == nil {
		t.Fatal("Partition with a frame handed out succeeded")
	}
	if err := u.Free(addr); err != nil {
		t.Fatal(err)
	}
	parts, err := u.Partition(3)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := u.Alloc(); ok {
		t.Fatal("the UMEM's own allocator still hands out frames after Partition")
	}
	owner := map[uint64]int{}
	var prevHi uint64
	for i, p := range parts {
		lo, hi := p.Range()
		if lo != prevHi {
			t.Fatalf("part %d starts at %#x, previous ended at %#x", i, lo, prevHi)
		}
		prevHi = hi
		for {
			addr, ok := p.Alloc()
			if !ok {
				break
			}
			if prev, dup := owner[addr]; dup {
				t.Fatalf("frame %#x handed out by parts %d and %d", addr, prev, i)
			}
			owner[addr] = i
		}
	}
	if len(owner) != 10 || prevHi != 10*2048 {
		t.Fatalf("parts cover %d frames up to %#x, want all 10", len(owner), prevHi)
	}
	if got := []uint32{parts[0].Frames(), parts[1].Frames(), parts[2].Frames()}; got[0] != 4 || got[1] != 3 || got[2] != 3 {
		t.Fatalf("part sizes %v, want [4 3 3]", got)
	}
	// A frame freed into the wrong part is refused.
	var fromFirst uint64
	for addr, i := range owner {
		if i == 0 {
			fromFirst = addr
			break
		}
	}
	if err := parts[1].Free(fromFirst); !errors.Is(err, ErrFrameOutOfRange) {
		t.Fatalf("Free into another part = %v, want ErrFrameOutOfRange", err)
	}
	if err := u.Free(fromFirst); !errors.Is(err, ErrFrameNotAllocated) {
		t.Fatalf("Free into the partitioned UMEM allocator = %v, want ErrFrameNotAllocated", err)
	}
}

func TestUMEMCloseIdempotent(t *testing.T) {
	u, err := NewUMEM(UMEMConfig{NumFrames: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
	if err := u.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := NewSocket(nil, SocketConfig{Ifindex: 1}); err == nil {
		t.Fatal("NewSocket accepted a nil UMEM")
	}
	if _, err := NewSocket(u, SocketConfig{Ifindex: 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("NewSocket on a closed UMEM = %v, want ErrClosed", err)
	}
}

func TestSocketConfigValidation(t *testing.T) {
	u, err := NewUMEM(UMEMConfig{NumFrames: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	tests := []struct {
		name    string
		cfg     SocketConfig
		wantErr string
	}{
		{"no ifindex", SocketConfig{}, "ifindex 0"},
		{"RX ring not a power of two", SocketConfig{Ifindex: 1, RxRingSize: 1000}, "RX ring size 1000"},
		{"TX ring not a power of two", SocketConfig{Ifindex: 1, TxRingSize: 3}, "TX ring size 3"},
		{"unknown mode", SocketConfig{Ifindex: 1, Mode: 7}, "bind mode 7"},
		{"negative busy-poll timeout", SocketConfig{Ifindex: 1, BusyPoll: &BusyPollConfig{Timeout: -1}}, "busy-poll timeout"},
		{"busy-poll budget too big", SocketConfig{Ifindex: 1, BusyPoll: &BusyPollConfig{Budget: 70000}}, "busy-poll budget 70000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewSocket(u, tc.cfg)
			if err == nil {
				s.Close()
				t.Fatalf("NewSocket accepted %+v", tc.cfg)
			}
			if !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "queue 0 of ifindex") {
				t.Fatalf("error %q does not name %q and the queue", err, tc.wantErr)
			}
		})
	}
}

func TestMemlockRaise(t *testing.T) {
	const inf = unix.RLIM_INFINITY
	tests := []struct {
		name    string
		lim     unix.Rlimit
		size    uint64
		want    *unix.Rlimit
		wantErr bool
	}{
		{"unlimited", unix.Rlimit{Cur: inf, Max: inf}, 1 << 30, nil, false},
		{"soft limit suffices", unix.Rlimit{Cur: 64 << 20, Max: 64 << 20}, 16 << 20, nil, false},
		{"raise to unlimited hard limit", unix.Rlimit{Cur: 8 << 20, Max: inf}, 16 << 20, &unix.Rlimit{Cur: inf, Max: inf}, false},
		{"raise to finite hard limit", unix.Rlimit{Cur: 8 << 20, Max: 32 << 20}, 16 << 20, &unix.Rlimit{Cur: 32 << 20, Max: 32 << 20}, false},
		{"hard limit too small", unix.Rlimit{Cur: 8 << 20, Max: 8 << 20}, 16 << 20, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := memlockRaise(tc.lim, tc.size)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "CAP_IPC_LOCK") {
				t.Fatalf("error %q does not say how to fix it", err)
			}
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Fatalf("memlockRaise = %+v, want %+v", got, tc.want)
			}
		})
	}
}
