package memreg

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
)

const pd = 7

func newTable(t *testing.T, capacity int) *Table {
	t.Helper()
	tab, err := New(capacity)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

func mustRegister(t *testing.T, tab *Table, r Region) Tokens {
	t.Helper()
	tok, err := tab.Register(r)
	if err != nil {
		t.Fatalf("Register(%+v): %v", r, err)
	}
	return tok
}

func TestNewRejectsBadCapacity(t *testing.T) {
	for _, c := range []int{0, -1, MaxCapacity + 1} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%d): no error", c)
		}
	}
}

func TestRegisterRejects(t *testing.T) {
	tab := newTable(t, 4)
	buf := make([]byte, 64)
	for _, tc := range []struct {
		name string
		r    Region
	}{
		{"zero-based address", Region{PD: pd, VA: 0, Buf: buf}},
		{"zero length", Region{PD: pd, VA: 0x1000, Buf: buf[:0]}},
		{"nil buffer", Region{PD: pd, VA: 0x1000}},
		{"wraps address space", Region{PD: pd, VA: math.MaxUint64 - 10, Buf: buf}},
		{"unknown access bits", Region{PD: pd, VA: 0x1000, Buf: buf, Access: 0x10}},
		{"remote write without local write", Region{PD: pd, VA: 0x1000, Buf: buf, Access: AccessRemoteWrite}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tok, err := tab.Register(tc.r); err == nil {
				t.Fatalf("registered as %+v", tok)
			}
		})
	}
}

func TestTokensHaveIndexAndDistinctKeys(t *testing.T) {
	tab := newTable(t, 8)
	for range 8 {
		tok := mustRegister(t, tab, Region{PD: pd, VA: 0x1000, Buf: make([]byte, 8)})
		if tok.Local>>tab.keyBits == 0 || tok.Local>>tab.keyBits != tok.Remote>>tab.keyBits {
			t.Fatalf("tokens %#x/%#x: want one non-zero index", tok.Local, tok.Remote)
		}
		if tok.Local == tok.Remote {
			t.Fatalf("local and remote token are both %#x", tok.Local)
		}
	}
	if _, err := tab.Register(Region{PD: pd, VA: 0x1000, Buf: make([]byte, 8)}); !errors.Is(err, ErrFull) {
		t.Fatalf("register into a full table: %v, want ErrFull", err)
	}
}

// TestKeysAreUnpredictable registers many regions and expects the key's
// low byte to spread: a constant or counter key would fail.
func TestKeysAreUnpredictable(t *testing.T) {
	tab := newTable(t, 512)
	seen := map[uint8]int{}
	var prev uint8
	sequential := 0
	for range 512 {
		tok := mustRegister(t, tab, Region{PD: pd, VA: 0x1000, Buf: make([]byte, 1)})
		k := uint8(tok.Local)
		if k == prev+1 {
			sequential++
		}
		prev = k
		seen[k]++
	}
	// 512 draws from 256 values: about 221 distinct expected; fewer than 150
	// would be astronomically unlikely for a uniform source.
	if len(seen) < 150 {
		t.Fatalf("only %d distinct key bytes in 512 registrations", len(seen))
	}
	if sequential > 20 {
		t.Fatalf("%d sequential key bytes: keys look like a counter", sequential)
	}
}

func TestBoundsAtBothEdges(t *testing.T) {
	tab := newTable(t, 4)
	const base, size = 0x10000, 4096
	buf := make([]byte, size)
	tok := mustRegister(t, tab, Region{PD: pd, VA: base, Buf: buf, Access: AccessLocalWrite | AccessRemoteRead})
	for _, tc := range []struct {
		name   string
		va     uint64
		length uint32
		want   Fault
	}{
		{"whole region", base, size, OK},
		{"first byte", base, 1, OK},
		{"last byte", base + size - 1, 1, OK},
		{"empty at end", base + size, 0, OK},
		{"one before start", base - 1, 1, FaultBounds},
		{"start minus one, spanning", base - 1, 2, FaultBounds},
		{"one past end", base + size, 1, FaultBounds},
		{"last byte plus one", base + size - 1, 2, FaultBounds},
		{"whole plus one", base, size + 1, FaultBounds},
		{"far below", 0, 1, FaultBounds},
		{"va+len overflows", math.MaxUint64, 2, FaultBounds},
		{"va+len overflows to inside", math.MaxUint64 - 1, math.MaxUint32, FaultBounds},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, f := tab.CheckLocal(pd, tok.Local, tc.va, tc.length, 0)
			if f != tc.want {
				t.Fatalf("CheckLocal: %v, want %v", f, tc.want)
			}
			if _, f := tab.CheckRemote(pd, tok.Remote, tc.va, tc.length, AccessRemoteRead); f != tc.want {
				t.Fatalf("CheckRemote: %v, want %v", f, tc.want)
			}
			if f == OK && len(b) != int(tc.length) {
				t.Fatalf("returned %d bytes, want %d", len(b), tc.length)
			}
		})
	}
}

// TestRegionNearTopOfAddressSpace: bounds arithmetic must not overflow
// when the region itself ends at 2^64-1.
func TestRegionNearTopOfAddressSpace(t *testing.T) {
	tab := newTable(t, 1)
	va := uint64(math.MaxUint64 - 15)
	tok := mustRegister(t, tab, Region{PD: pd, VA: va, Buf: make([]byte, 15)})
	if _, f := tab.CheckLocal(pd, tok.Local, va, 15, 0); f != OK {
		t.Fatalf("whole region: %v", f)
	}
	if _, f := tab.CheckLocal(pd, tok.Local, va+1, 15, 0); f != FaultBounds {
		t.Fatalf("one past the end: %v", f)
	}
}

// TestAddressIsAnIndexOnly follows seed 001: the provider treats the
// registered virtual address as an index and never as a pointer. The region
// is registered at a made-up address; bytes are reached through the slice.
func TestAddressIsAnIndexOnly(t *testing.T) {
	tab := newTable(t, 1)
	buf := make([]byte, 32)
	tok := mustRegister(t, tab, Region{PD: pd, VA: 0x7000_0000, Buf: buf, Access: AccessLocalWrite})
	dst, f := tab.CheckLocal(pd, tok.Local, 0x7000_0000+8, 4, AccessLocalWrite)
	if f != OK {
		t.Fatal(f)
	}
	copy(dst, "abcd")
	if string(buf[8:12]) != "abcd" {
		t.Fatalf("write landed elsewhere: %q", buf)
	}
}

// TestEveryRightCombination checks each valid NDK_MR_FLAG combination
// against each kind of access.
func TestEveryRightCombination(t *testing.T) {
	type needs struct{ read, write, readSink, remoteRead, remoteWrite bool }
	for _, tc := range []struct {
		access Access
		want   needs
	}{
		{0, needs{read: true}},
		{AccessLocalWrite, needs{read: true, write: true, readSink: true}},
		{AccessRemoteRead, needs{read: true, remoteRead: true}},
		{AccessLocalWrite | AccessRemoteRead, needs{read: true, write: true, readSink: true, remoteRead: true}},
		{AccessLocalWrite | AccessRemoteWrite, needs{read: true, write: true, readSink: true, remoteWrite: true}},
		{AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead, needs{true, true, true, true, true}},
		{AccessReadSink, needs{read: true, readSink: true}},
		{AccessReadSink | AccessLocalWrite, needs{read: true, write: true, readSink: true}},
		{AccessReadSink | AccessRemoteRead, needs{read: true, readSink: true, remoteRead: true}},
		{AccessReadSink | AccessLocalWrite | AccessRemoteWrite, needs{read: true, write: true, readSink: true, remoteWrite: true}},
		{accessKnown, needs{true, true, true, true, true}},
	} {
		tab := newTable(t, 1)
		tok := mustRegister(t, tab, Region{PD: pd, VA: 0x1000, Buf: make([]byte, 16), Access: tc.access})
		got := func(f Fault) bool {
			if f != OK && f != FaultAccess {
				t.Fatalf("access %#x: unexpected fault %v", tc.access, f)
			}
			return f == OK
		}
		local := func(need Access) bool { _, f := tab.CheckLocal(pd, tok.Local, 0x1000, 16, need); return got(f) }
		remote := func(need Access) bool { _, f := tab.CheckRemote(pd, tok.Remote, 0x1000, 16, need); return got(f) }
		have := needs{
			read:        local(0),
			write:       local(AccessLocalWrite),
			readSink:    local(AccessReadSink),
			remoteRead:  remote(AccessRemoteRead),
			remoteWrite: remote(AccessRemoteWrite),
		}
		if have != tc.want {
			t.Errorf("access %#x: rights %+v, want %+v", tc.access, have, tc.want)
		}
	}
}

func TestWrongTokenKindAndPD(t *testing.T) {
	tab := newTable(t, 2)
	tok := mustRegister(t, tab, Region{PD: pd, VA: 0x1000, Buf: make([]byte, 16), Access: accessKnown})
	if _, f := tab.CheckLocal(pd, tok.Remote, 0x1000, 1, 0); f != FaultToken {
		t.Errorf("remote token used locally: %v", f)
	}
	if _, f := tab.CheckRemote(pd, tok.Local, 0x1000, 1, AccessRemoteRead); f != FaultToken {
		t.Errorf("local token used remotely: %v", f)
	}
	if _, f := tab.CheckLocal(pd+1, tok.Local, 0x1000, 1, 0); f != FaultPD {
		t.Errorf("other PD locally: %v", f)
	}
	if _, f := tab.CheckRemote(pd+1, tok.Remote, 0x1000, 1, AccessRemoteRead); f != FaultPD {
		t.Errorf("other PD remotely: %v", f)
	}
	for _, bad := range []uint32{0, 0xff, tok.Local ^ 1, 0xffffffff} {
		if _, f := tab.CheckLocal(pd, bad, 0x1000, 1, 0); f != FaultToken {
			t.Errorf("token %#x: %v", bad, f)
		}
	}
}

func TestDeregisteredTokensFailImmediately(t *testing.T) {
	tab := newTable(t, 2)
	tok := mustRegister(t, tab, Region{PD: pd, VA: 0x1000, Buf: make([]byte, 16), Access: accessKnown})
	if err := tab.Deregister(tok.Remote); err == nil {
		t.Fatal("deregister by remote token accepted")
	}
	if err := tab.Deregister(tok.Local); err != nil {
		t.Fatal(err)
	}
	if _, f := tab.CheckLocal(pd, tok.Local, 0x1000, 1, 0); f != FaultToken {
		t.Errorf("local token after deregister: %v", f)
	}
	if _, f := tab.CheckRemote(pd, tok.Remote, 0x1000, 1, AccessRemoteRead); f != FaultToken {
		t.Errorf("remote token after deregister: %v", f)
	}
	if err := tab.Deregister(tok.Local); err == nil {
		t.Error("second deregister accepted")
	}
}

// TestStaleTokenAfterSlotReuse re-registers into the only slot many times:
// each new registration must reject every token of the previous one.
func TestStaleTokenAfterSlotReuse(t *testing.T) {
	tab := newTable(t, 1)
	r := Region{PD: pd, VA: 0x1000, Buf: make([]byte, 16), Access: accessKnown}
	old := mustRegister(t, tab, r)
	for i := range 2000 {
		if err := tab.Deregister(old.Local); err != nil {
			t.Fatal(err)
		}
		tok := mustRegister(t, tab, r)
		if tok.Local>>tab.keyBits != old.Local>>tab.keyBits {
			t.Fatalf("slot not reused: %#x then %#x", old.Local, tok.Local)
		}
		for _, stale := range []uint32{old.Local, old.Remote} {
			if stale == tok.Local || stale == tok.Remote {
				t.Fatalf("round %d: new tokens %#x/%#x reuse old token %#x", i, tok.Local, tok.Remote, stale)
			}
		}
		if _, f := tab.CheckLocal(pd, old.Local, 0x1000, 1, 0); f != FaultToken {
			t.Fatalf("round %d: stale local token: %v", i, f)
		}
		if _, f := tab.CheckRemote(pd, old.Remote, 0x1000, 1, AccessRemoteRead); f != FaultToken {
			t.Fatalf("round %d: stale remote token: %v", i, f)
		}
		old = tok
	}
}

func TestInvalidate(t *testing.T) {
	tab := newTable(t, 4)
	r := Region{PD: pd, VA: 0x1000, Buf: make([]byte, 16), Access: accessKnown, Invalidatable: true}
	tok := mustRegister(t, tab, r)
	if f := tab.Invalidate(pd+1, tok.Remote); f != FaultPD {
		t.Fatalf("invalidate from another PD: %v", f)
	}
	if f := tab.Invalidate(pd, tok.Remote^0x80); f != FaultToken {
		t.Fatalf("invalidate with a bad token: %v", f)
	}
	if f := tab.Invalidate(pd, tok.Remote); f != OK {
		t.Fatalf("invalidate: %v", f)
	}
	if _, f := tab.CheckLocal(pd, tok.Local, 0x1000, 1, 0); f != FaultInvalidated {
		t.Errorf("local use after invalidate: %v", f)
	}
	if _, f := tab.CheckRemote(pd, tok.Remote, 0x1000, 1, AccessRemoteRead); f != FaultInvalidated {
		t.Errorf("remote use after invalidate: %v", f)
	}
	if f := tab.Invalidate(pd, tok.Remote); f != FaultInvalidated {
		t.Errorf("second invalidate: %v", f)
	}
	if f := tab.Invalidate(pd, tok.Local); f != FaultInvalidated {
		t.Errorf("invalidate by local token after remote invalidation: %v", f)
	}

	tok2 := mustRegister(t, tab, r)
	if f := tab.Invalidate(pd, tok2.Local); f != OK {
		t.Errorf("invalidate by local token: %v", f)
	}

	plain := mustRegister(t, tab, Region{PD: pd, VA: 0x1000, Buf: make([]byte, 16), Access: accessKnown})
	if f := tab.Invalidate(pd, plain.Remote); f != FaultNotInvalidatable {
		t.Errorf("invalidate a registered MR: %v", f)
	}
	if _, f := tab.CheckRemote(pd, plain.Remote, 0x1000, 1, AccessRemoteRead); f != OK {
		t.Errorf("refused invalidation changed the region: %v", f)
	}
}

func TestChecksAllocateNothing(t *testing.T) {
	tab := newTable(t, 4)
	tok := mustRegister(t, tab, Region{PD: pd, VA: 0x1000, Buf: make([]byte, 4096), Access: accessKnown, Invalidatable: true})
	var sink int
	a := testing.AllocsPerRun(1000, func() {
		b, _ := tab.CheckLocal(pd, tok.Local, 0x1100, 512, AccessLocalWrite)
		sink += len(b)
		b, _ = tab.CheckRemote(pd, tok.Remote, 0x1200, 512, AccessRemoteWrite)
		sink += len(b)
		_, f := tab.CheckRemote(pd, tok.Remote, 0x9000, 512, AccessRemoteWrite)
		sink += int(f)
		sink += int(tab.Invalidate(pd, tok.Local^0x01))
	})
	if a != 0 {
		t.Fatalf("checks allocate %.1f times", a)
	}
	_ = sink
}

// TestConcurrentLookupsDuringChurn runs lock-free lookups while another
// goroutine registers and deregisters; -race checks the publication, the
// assertions check that a lookup never returns another region's bytes.
func TestConcurrentLookupsDuringChurn(t *testing.T) {
	tab := newTable(t, 8)
	stable := make([]byte, 64)
	for i := range stable {
		stable[i] = 0xAA
	}
	tok := mustRegister(t, tab, Region{PD: pd, VA: 0x1000, Buf: stable, Access: AccessRemoteRead})
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 20_000 && !stop.Load(); i++ {
			other, err := tab.Register(Region{PD: pd, VA: 0x1000, Buf: make([]byte, 64), Access: AccessRemoteRead})
			if err != nil {
				t.Error(err)
				return
			}
			if err := tab.Deregister(other.Local); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := 0; i < 50_000; i++ {
		b, f := tab.CheckRemote(pd, tok.Remote, 0x1000, 64, AccessRemoteRead)
		if f != OK || b[0] != 0xAA || b[63] != 0xAA {
			stop.Store(true)
			t.Fatalf("lookup %d: fault %v", i, f)
		}
	}
	stop.Store(true)
	wg.Wait()
}

func BenchmarkCheckRemote(b *testing.B) {
	tab, _ := New(1024)
	tok, _ := tab.Register(Region{PD: pd, VA: 0x1000, Buf: make([]byte, 1<<20), Access: accessKnown})
	b.ReportAllocs()
	for b.Loop() {
		tab.CheckRemote(pd, tok.Remote, 0x2000, 4096, AccessRemoteWrite)
	}
}

// TestKeysUseEveryBitBesideTheIndex: the index takes only the bits the
// capacity needs; the rest of the token is key, and every key bit varies.
// ndk's 65,536-region table leaves 15 key bits, the largest table 8.
func TestKeysUseEveryBitBesideTheIndex(t *testing.T) {
	for _, c := range []struct {
		capacity int
		bits     uint
	}{{1, 31}, {8, 28}, {512, 22}, {1 << 16, 15}, {MaxCapacity, 8}} {
		if got := KeyBits(c.capacity); got != c.bits {
			t.Errorf("KeyBits(%d) = %d, want %d", c.capacity, got, c.bits)
		}
	}
	tab := newTable(t, 1<<16)
	var ones, zeros uint32
	for range 256 {
		tok := mustRegister(t, tab, Region{PD: pd, VA: 0x1000, Buf: make([]byte, 1)})
		for _, k := range []uint32{tok.Local, tok.Remote} {
			key := k & (1<<15 - 1)
			ones |= key
			zeros |= ^key & (1<<15 - 1)
		}
	}
	if ones != 1<<15-1 || zeros != 1<<15-1 {
		t.Fatalf("key bits that never varied: always 0 %#x, always 1 %#x", ^ones&(1<<15-1), ^zeros&(1<<15-1))
	}
}
