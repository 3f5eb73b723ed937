package ndk

import (
	"encoding/binary"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"unsafe"
)

// TestAtomicExtension runs the extension end to end over the pipe: a
// FETCH_ADD and a CMP_SWAP on the peer's word, the original values in the
// result SGEs, the completion types, and the peer's memory afterwards.
func TestAtomicExtension(t *testing.T) {
	x, y := pipePair(t, true)
	res := make([]uint64, 2)
	resBytes := unsafe.Slice((*byte)(unsafe.Pointer(&res[0])), 16)
	word := make([]uint64, 1)
	word[0] = 100
	wordBytes := unsafe.Slice((*byte)(unsafe.Pointer(&word[0])), 8)
	rmr, err := x.pd.RegisterMR(resBytes, MRFlagAllowLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	wmr, err := y.pd.RegisterMR(wordBytes, MRFlagAllowRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	if wmr.Flags() != MRFlagAllowRemoteAtomic {
		t.Fatalf("flags %v", wmr.Flags())
	}
	r0, _ := rmr.SGE(0, 8)
	r1, _ := rmr.SGE(8, 8)
	y.a.Stats() // orders the initial value before the peer's engine
	if err := x.qp.FetchAndAdd("fa", r0, wmr.Addr(), wmr.RemoteToken(), 5, 0); err != nil {
		t.Fatal(err)
	}
	if err := x.qp.CompareAndSwap("cs", r1, wmr.Addr(), wmr.RemoteToken(), 105, 7, 0); err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		ctx string
		typ OperationType
	}{{"fa", OpFetchAndAdd}, {"cs", OpCompareAndSwap}} {
		r := waitResult(t, x.icq)
		if r.Status != StatusSuccess || r.Type != want.typ || r.RequestContext != want.ctx {
			t.Fatalf("completion %+v, want %v for %s", r, want.typ, want.ctx)
		}
	}
	if res[0] != 100 || res[1] != 105 {
		t.Fatalf("original values %d, %d; want 100, 105", res[0], res[1])
	}
	if got := atomic.LoadUint64(&word[0]); got != 7 {
		t.Fatalf("peer word %d, want 7", got)
	}
	if s := y.a.Stats()[0]; s.Atomics != 2 {
		t.Fatalf("peer executed %d atomics", s.Atomics)
	}
}

// TestAtomicExtensionRefusals: the local checks of the extension and the
// peer's refusal of a region registered without the atomic right.
func TestAtomicExtensionRefusals(t *testing.T) {
	x, y := pipePair(t, true)
	if _, err := x.pd.RegisterMR(make([]byte, 8), MRFlagAllowRemoteAtomic&^MRFlagAllowLocalWrite); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("remote atomic without local write: %v", err)
	}
	res := make([]byte, 16)
	rmr, _ := x.pd.RegisterMR(res, MRFlagAllowLocalWrite)
	short, _ := rmr.SGE(0, 4)
	if err := x.qp.FetchAndAdd(nil, short, 8, 1, 1, 0); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("4-byte result: %v", err)
	}
	r, _ := rmr.SGE(0, 8)
	if err := x.qp.CompareAndSwap(nil, r, 8, 1, 1, 2, OpFlagInline); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("INLINE atomic: %v", err)
	}
	word := make([]uint64, 1)
	wmr, _ := y.pd.RegisterMR(unsafe.Slice((*byte)(unsafe.Pointer(&word[0])), 8), MRFlagAllowRemoteWrite|MRFlagAllowRemoteRead)
	if err := x.qp.FetchAndAdd("fa", r, wmr.Addr(), wmr.RemoteToken(), 1, 0); err != nil {
		t.Fatal(err)
	}
	c := waitResult(t, x.icq)
	if c.Status != StatusAccessViolation || c.Type != OpFetchAndAdd || c.ProviderErrorCode != 10 {
		t.Fatalf("completion %+v, want ACCESS_VIOLATION with IB_WC_REM_ACCESS_ERR", c)
	}
	if atomic.LoadUint64(&word[0]) != 0 {
		t.Fatal("the refused atomic changed the word")
	}
	if OpFetchAndAdd.String() != "FetchAndAdd" || OpCompareAndSwap.String() != "CompareAndSwap" {
		t.Fatalf("names %q %q", OpFetchAndAdd, OpCompareAndSwap)
	}
}

// TestAtomicExtensionAllocatesNothing: posting and completing atomics
// through the public API allocates nothing.
func TestAtomicExtensionAllocatesNothing(t *testing.T) {
	x, y := pipePair(t, true)
	res := make([]byte, 8)
	rmr, _ := x.pd.RegisterMR(res, MRFlagAllowLocalWrite)
	r, _ := rmr.SGE(0, 8)
	word := make([]uint64, 1)
	wmr, _ := y.pd.RegisterMR(unsafe.Slice((*byte)(unsafe.Pointer(&word[0])), 8), MRFlagAllowRemoteAtomic)
	var out [1]ResultEx
	round := func() {
		if err := x.qp.FetchAndAdd(nil, r, wmr.Addr(), wmr.RemoteToken(), 1, 0); err != nil {
			t.Fatal(err)
		}
		for x.icq.GetResultsEx(out[:]) == 0 {
			runtime.Gosched()
		}
	}
	for i := 0; i < 20; i++ {
		round()
	}
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Fatalf("%.2f allocations per atomic, want 0", n)
	}
	if got := binary.NativeEndian.Uint64(res); got != atomic.LoadUint64(&word[0])-1 {
		t.Fatalf("last original value %d, word %d", got, word[0])
	}
}
