package memreg

import (
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"
)

func addr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// qp is the QP number the tests bind windows for.
const qp = 0x123

// TestFastMRLifecycle: a fast MR has no memory until FastRegister, which
// gives it new tokens; it must be invalidated before the next one; rights,
// size and PD are checked; the handle frees it.
func TestFastMRLifecycle(t *testing.T) {
	tab := newTable(t, 16)
	init, err := tab.AllocFastMR(pd, 4096, false)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	va := addr(buf)
	if _, f := tab.CheckLocal(pd, init.Local, va, 1, 0); f != FaultInvalidated {
		t.Fatalf("unregistered fast MR: %v", f)
	}
	for name, c := range map[string]struct {
		pd     uint32
		buf    []byte
		access Access
		want   Fault
	}{
		"RemoteWithoutRemoteAccess": {pd, buf, AccessRemoteRead, FaultAccess},
		"OverSize":                  {pd, make([]byte, 4097), 0, FaultBounds},
		"Empty":                     {pd, nil, 0, FaultBounds},
		"OtherPD":                   {pd + 1, buf, 0, FaultPD},
	} {
		if _, f := tab.FastRegister(c.pd, init.Local, addr(c.buf), c.buf, c.access); f != c.want {
			t.Errorf("%s: %v, want %v", name, f, c.want)
		}
	}
	tok, f := tab.FastRegister(pd, init.Local, va, buf, AccessLocalWrite)
	if f != OK || tok.Local == init.Local || tok.Remote == init.Remote || tok.Local == tok.Remote {
		t.Fatalf("FastRegister: %+v %v (init %+v)", tok, f, init)
	}
	if b, f := tab.CheckLocal(pd, tok.Local, va+100, 10, AccessLocalWrite); f != OK || &b[0] != &buf[100] {
		t.Fatalf("check with the new token: %v", f)
	}
	if _, f := tab.CheckLocal(pd, init.Local, va, 1, 0); f != FaultToken {
		t.Fatalf("old token after FastRegister: %v", f)
	}
	if _, f := tab.CheckRemote(pd, tok.Remote, va, 1, AccessRemoteRead); f != FaultAccess {
		t.Fatalf("remote read without the right: %v", f)
	}
	if _, f := tab.FastRegister(pd, tok.Local, va, buf, 0); f != FaultState {
		t.Fatalf("FastRegister of a registered fast MR: %v", f)
	}
	if f := tab.Invalidate(pd, tok.Local); f != OK {
		t.Fatalf("invalidate: %v", f)
	}
	if f := tab.Invalidate(pd, tok.Remote); f != FaultInvalidated {
		t.Fatalf("second invalidate: %v", f)
	}
	if _, f := tab.CheckLocal(pd, tok.Local, va, 1, 0); f != FaultInvalidated {
		t.Fatalf("check after invalidate: %v", f)
	}
	if _, f := tab.FastRegister(pd, tok.Local, va, buf, 0); f != OK {
		t.Fatalf("FastRegister after invalidate: %v", f)
	}
	if err := tab.Deregister(init.Local); err != nil {
		t.Fatalf("deregister by handle: %v", err)
	}
	if _, f := tab.FastRegister(pd, init.Local, va, buf, 0); f != FaultToken {
		t.Fatalf("FastRegister after close: %v", f)
	}
}

// TestWindowBind: a window reaches only its range of the MR, with rights
// within the MR's, and only from the QP that bound it; it has no local
// token; rebinding kills the old token; it dies with its MR.
func TestWindowBind(t *testing.T) {
	tab := newTable(t, 16)
	buf := make([]byte, 1024)
	va := addr(buf)
	mr := mustRegister(t, tab, Region{PD: pd, VA: va, Buf: buf, Access: AccessRemoteRead | AccessLocalWrite})
	w, err := tab.AllocWindow(pd)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		mw, mr uint32
		va, n  uint64
		access Access
		want   Fault
	}{
		"WriteOnReadOnlyMR": {w.Remote, mr.Local, va, 8, AccessRemoteWrite, FaultAccess},
		"PastMR":            {w.Remote, mr.Local, va + 1000, 25, AccessRemoteRead, FaultBounds},
		"LocalRight":        {w.Remote, mr.Local, va, 8, AccessLocalWrite, FaultAccess},
		"MRByRemoteToken":   {w.Remote, mr.Remote, va, 8, AccessRemoteRead, FaultToken},
		"WindowAsMR":        {w.Remote, w.Remote, va, 8, AccessRemoteRead, FaultKind},
	} {
		if _, f := tab.Bind(pd, qp, c.mw, c.mr, c.va, c.n, c.access); f != c.want {
			t.Errorf("%s: %v, want %v", name, f, c.want)
		}
	}
	r1, f := tab.Bind(pd, qp, w.Remote, mr.Local, va+256, 256, AccessRemoteRead)
	if f != OK {
		t.Fatal(f)
	}
	if _, f := tab.CheckRemoteOn(pd, qp, r1, va+256, 256, AccessRemoteRead); f != OK {
		t.Fatalf("inside the window: %v", f)
	}
	for _, c := range []struct{ va, n uint64 }{{va + 255, 1}, {va + 512, 1}, {va + 300, 213}} {
		if _, f := tab.CheckRemoteOn(pd, qp, r1, c.va, uint32(c.n), AccessRemoteRead); f != FaultBounds {
			t.Errorf("[%#x, +%d) outside the window: %v", c.va-va, c.n, f)
		}
	}
	if _, f := tab.CheckLocal(pd, r1, va+256, 1, 0); f != FaultToken {
		t.Fatalf("a window's token used locally: %v", f)
	}
	if _, f := tab.CheckRemoteOn(pd, qp+1, r1, va+256, 1, AccessRemoteRead); f != FaultToken {
		t.Fatalf("a window used from another QP: %v", f)
	}
	if _, f := tab.CheckRemote(pd, r1, va+256, 1, AccessRemoteRead); f != FaultToken {
		t.Fatalf("a window reached without a QP: %v", f)
	}
	r2, f := tab.Bind(pd, qp, r1, mr.Local, va, 1024, AccessRemoteRead)
	if f != OK || r2 == r1 {
		t.Fatalf("rebind: %#x %v", r2, f)
	}
	if _, f := tab.CheckRemoteOn(pd, qp, r1, va+256, 1, AccessRemoteRead); f != FaultToken {
		t.Fatalf("old token after rebind: %v", f)
	}
	if err := tab.Deregister(mr.Local); err != nil {
		t.Fatal(err)
	}
	if _, f := tab.CheckRemoteOn(pd, qp, r2, va, 1, AccessRemoteRead); f != FaultInvalidated {
		t.Fatalf("window of a deregistered MR: %v", f)
	}
}

// TestMutableChecksDuringChurn: engines checking a fast MR's and a
// window's tokens while the consumer invalidates and registers them again
// see either a consistent registration or a fault, never a torn one (run
// with -race).
func TestMutableChecksDuringChurn(t *testing.T) {
	tab := newTable(t, 16)
	bufs := [2][]byte{make([]byte, 512), make([]byte, 1024)}
	fast, _ := tab.AllocFastMR(pd, 4096, true)
	win, _ := tab.AllocWindow(pd)
	var cur, curW atomic.Uint64 // remote token<<32 | which buffer
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for i, c := range []*atomic.Uint64{&cur, &curW} {
					v := c.Load()
					b := bufs[v&1]
					got, f := tab.CheckRemoteOn(pd, uint32(i)*qp, uint32(v>>32), addr(b), uint32(len(b)), AccessRemoteRead)
					if f == OK && (len(got) != len(b) || &got[0] != &b[0]) {
						t.Errorf("token %#x checked out another registration's bytes", uint32(v>>32))
						return
					}
				}
			}
		}()
	}
	local := fast.Local
	for i := range 20000 {
		b := bufs[i&1]
		tok, f := tab.FastRegister(pd, local, addr(b), b, AccessRemoteRead)
		if f != OK {
			t.Fatalf("round %d: %v", i, f)
		}
		local = tok.Local
		cur.Store(uint64(tok.Remote)<<32 | uint64(i&1))
		r, f := tab.Bind(pd, qp, win.Remote, tok.Local, addr(b), uint64(len(b)), AccessRemoteRead)
		if f != OK {
			t.Fatalf("bind %d: %v", i, f)
		}
		win.Remote = r
		curW.Store(uint64(r)<<32 | uint64(i&1))
		if f := tab.Invalidate(pd, tok.Remote); f != OK {
			t.Fatalf("invalidate %d: %v", i, f)
		}
	}
	close(stop)
	wg.Wait()
}

// TestMutableOperationsAllocateNothing: FastRegister, Bind, checks and
// Invalidate run on the posting and packet paths.
func TestMutableOperationsAllocateNothing(t *testing.T) {
	tab := newTable(t, 16)
	buf := make([]byte, 256)
	fast, _ := tab.AllocFastMR(pd, 4096, true)
	win, _ := tab.AllocWindow(pd)
	local, wr := fast.Local, win.Remote
	n := testing.AllocsPerRun(100, func() {
		tok, _ := tab.FastRegister(pd, local, addr(buf), buf, AccessRemoteRead|AccessLocalWrite)
		local = tok.Local
		wr, _ = tab.Bind(pd, qp, wr, local, addr(buf), 256, AccessRemoteRead)
		_, _ = tab.CheckRemoteOn(pd, qp, wr, addr(buf), 8, AccessRemoteRead)
		_, _ = tab.CheckLocal(pd, local, addr(buf), 8, AccessLocalWrite)
		_ = tab.Invalidate(pd, wr)
		_ = tab.Invalidate(pd, local)
	})
	if n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

// TestStaleMutableTokenAfterSlotReuse: the last tokens of a closed fast MR
// never name the region that reuses its slot.
func TestStaleMutableTokenAfterSlotReuse(t *testing.T) {
	tab := newTable(t, 1) // one slot: every registration reuses it
	buf := make([]byte, 64)
	for range 200 {
		init, err := tab.AllocFastMR(pd, 4096, true)
		if err != nil {
			t.Fatal(err)
		}
		tok, f := tab.FastRegister(pd, init.Local, addr(buf), buf, AccessRemoteRead)
		if f != OK {
			t.Fatal(f)
		}
		if err := tab.Deregister(init.Local); err != nil {
			t.Fatal(err)
		}
		// With 31-bit keys a collision is too rare to meet by chance:
		// check that the slot remembers the keys to exclude.
		mask := uint32(1)<<tab.keyBits - 1
		if tab.lastLocal[1] != tok.Local&mask || tab.lastRemote[1] != tok.Remote&mask {
			t.Fatal("the slot does not remember the closed fast MR's last keys")
		}
		next := mustRegister(t, tab, Region{PD: pd, VA: addr(buf), Buf: buf, Access: AccessRemoteRead})
		if _, f := tab.CheckRemote(pd, tok.Remote, addr(buf), 1, AccessRemoteRead); f == OK {
			t.Fatalf("closed fast MR's token %#x reaches the slot's next region %+v", tok.Remote, next)
		}
		if err := tab.Deregister(next.Local); err != nil {
			t.Fatal(err)
		}
	}
}
