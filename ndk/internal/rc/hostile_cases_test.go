package rc

import (
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/cq"
	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// The cases of TestHostilePeer; hostile_test.go's table lists them with
// their verdicts.

const (
	nakRA  = rocev2.NAKRemoteAccessError
	nakIR  = rocev2.NAKInvalidRequest
	nakSeq = rocev2.NAKPSNSequenceError
	e0     = rocev2.PSN(0xFFFFFF) // B's expected PSN when a case starts
)

func malformed(s Stats) uint64        { return s.Malformed }
func stale(s Stats) uint64            { return s.Stale }
func duplicates(s Stats) uint64       { return s.Duplicates }
func accessViolations(s Stats) uint64 { return s.LocalAccessErrors }

func readResp(op rocev2.Opcode, psn rocev2.PSN, n int) answer {
	a := answer{op: op, psn: psn, n: n}
	if op != rocev2.RCReadResponseMiddle {
		a.syn = okSyn
	}
	return a
}

// nakOnly is a case whose one frame draws a fatal NAK at E.
func nakOnly(code rocev2.NAKCode, frame func(h *hostile) []byte) func(h *hostile) []answer {
	return func(h *hostile) []answer {
		h.inj.inject(frame(h))
		return []answer{nakAt(e0, code)}
	}
}

// writeTo is a 16-byte WRITE_ONLY at E.
func writeTo(va func(h *hostile) uint64, rkey func(h *hostile) uint32) func(h *hostile) []byte {
	return func(h *hostile) []byte {
		return h.write(rocev2.RCWriteOnly, e0, va(h), rkey(h), 16, payloadOf(16, 1))
	}
}

func mrVA(off int) func(h *hostile) uint64 { return func(h *hostile) uint64 { return h.mr.addr(off) } }
func mrKey(h *hostile) uint32              { return h.mr.tokens.Remote }

// regionKey registers a region of 64 bytes with access in pd and returns
// its remote token; prepare runs first (to deregister it, say).
func regionKey(access memreg.Access, pd uint32, prepare func(h *hostile, b *buffer)) func(h *hostile) (uint64, uint32) {
	return func(h *hostile) (uint64, uint32) {
		b := h.region(64, access, pd, false)
		if prepare != nil {
			prepare(h, b)
		}
		return b.addr(0), b.tokens.Remote
	}
}

func writeRegion(r func(h *hostile) (uint64, uint32)) func(h *hostile) []byte {
	return func(h *hostile) []byte {
		va, key := r(h)
		return h.write(rocev2.RCWriteOnly, e0, va, key, 16, payloadOf(16, 1))
	}
}

func hostileCases() []hostileCase {
	var cs []hostileCase
	cs = append(cs, writeCases()...)
	cs = append(cs, sendCases()...)
	cs = append(cs, readAtomicCases()...)
	cs = append(cs, psnCases()...)
	cs = append(cs, forgedCases()...)
	cs = append(cs, malformedCases()...)
	cs = append(cs, destinationCases()...)
	return cs
}

func writeCases() []hostileCase {
	deregister := func(h *hostile, b *buffer) {
		if err := h.b.regions.Deregister(b.tokens.Local); err != nil {
			h.t.Fatal(err)
		}
	}
	// two injects a FIRST of 256 bytes under a RETH of rethLen and a LAST
	// of last bytes in one batch: the FIRST lands, the LAST is refused.
	two := func(rethLen uint32, last int) func(h *hostile) []answer {
		return func(h *hostile) []answer {
			first := payloadOf(pmtu, 2)
			f := h.write(rocev2.RCWriteFirst, e0, h.mr.addr(0), mrKey(h), rethLen, first)
			l := h.hdr(rocev2.RCWriteLast, e0.Next())
			h.inj.inject(f, h.frame(l, payloadOf(last, 3)))
			h.expect(h.mr, 0, first)
			return []answer{nakAt(e0.Next(), nakIR)}
		}
	}
	return []hostileCase{
		{name: "write/bad-token", fails: true, run: nakOnly(nakRA, writeTo(mrVA(0), func(h *hostile) uint32 { return h.mr.tokens.Remote ^ 1 }))},
		{name: "write/deregistered-token", fails: true, run: nakOnly(nakRA, writeRegion(regionKey(allRemote, testPD, deregister)))},
		{name: "write/other-pd-token", fails: true, run: nakOnly(nakRA, writeRegion(regionKey(allRemote, testPD+2, nil)))},
		{name: "write/no-write-right", fails: true, run: nakOnly(nakRA, writeRegion(regionKey(memreg.AccessLocalWrite|memreg.AccessRemoteRead, testPD, nil)))},
		{name: "write/one-past-end", fails: true, run: nakOnly(nakRA, writeTo(mrVA(1024-15), mrKey))},
		{name: "write/below-start", fails: true, run: nakOnly(nakRA, writeTo(func(h *hostile) uint64 { return h.mr.addr(0) - 1 }, mrKey))},
		{name: "write/va-wraps-2^64", fails: true, run: nakOnly(nakRA, writeTo(func(*hostile) uint64 { return ^uint64(7) }, mrKey))},
		{name: "write/dmalen-wraps", fails: true, run: nakOnly(nakRA, func(h *hostile) []byte {
			return h.write(rocev2.RCWriteOnly, e0, h.mr.addr(8), mrKey(h), 0xFFFFFFFF, payloadOf(16, 1))
		})},
		{name: "write/reth-longer-than-payload", fails: true, run: nakOnly(nakIR, func(h *hostile) []byte {
			return h.write(rocev2.RCWriteOnly, e0, h.mr.addr(0), mrKey(h), 32, payloadOf(16, 1))
		})},
		{name: "write/reth-shorter-than-payload", fails: true, run: nakOnly(nakIR, func(h *hostile) []byte {
			return h.write(rocev2.RCWriteOnly, e0, h.mr.addr(0), mrKey(h), 8, payloadOf(16, 1))
		})},
		{name: "write/zero-length-garbage-key", live: true, run: func(h *hostile) []answer {
			h.inj.inject(h.write(rocev2.RCWriteOnly, e0, 1, 0, 0, nil))
			return []answer{ackAt(e0)}
		}},
		{name: "write/middle-without-first", fails: true, run: nakOnly(nakIR, func(h *hostile) []byte {
			return h.frame(h.hdr(rocev2.RCWriteMiddle, e0), payloadOf(pmtu, 1))
		})},
		{name: "write/last-without-first", fails: true, run: nakOnly(nakIR, func(h *hostile) []byte {
			return h.frame(h.hdr(rocev2.RCWriteLast, e0), payloadOf(16, 1))
		})},
		{name: "write/first-short", fails: true, run: nakOnly(nakIR, func(h *hostile) []byte {
			return h.write(rocev2.RCWriteFirst, e0, h.mr.addr(0), mrKey(h), 512, payloadOf(100, 1))
		})},
		{name: "write/last-longer-than-reth", fails: true, run: two(300, 200)},
		{name: "write/last-shorter-than-reth", fails: true, run: two(512, 100)},
		{name: "write/last-empty", fails: true, run: two(pmtu, 0)},
		{name: "write/only-over-pmtu", fails: true, run: nakOnly(nakIR, func(h *hostile) []byte {
			return h.write(rocev2.RCWriteOnly, e0, h.mr.addr(0), mrKey(h), 2*pmtu, payloadOf(2*pmtu, 1))
		})},
		{name: "write/with-immediate-no-receive", live: true, run: func(h *hostile) []answer {
			h.inj.inject(h.write(rocev2.RCWriteOnlyImm, e0, h.mr.addr(0), mrKey(h), 16, payloadOf(16, 1)))
			return []answer{{op: rocev2.RCAck, psn: e0, syn: rocev2.RNRNAKSyndrome(rocev2.RNRTimer(1))}}
		}},
	}
}

// receive posts a receive of n bytes on B into a fresh fenced region.
func (h *hostile) receive(n int) *buffer {
	r := h.region(n, memreg.AccessLocalWrite, testPD, false)
	mustPost(h.t, h.qb.PostReceive(n, []SGE{r.sge(0, n)}))
	return r
}

// recvDone waits for B's next receive completion and checks it.
func (h *hostile) recvDone(status ndkpi.Status, typ ndkpi.OperationType, code, n uint32) cq.Entry {
	h.t.Helper()
	e := waitCQ(h.t, h.b.rcq, 1, 5*time.Second)[0]
	if e.Status != status || e.Type != typ || e.ProviderErrorCode != code || e.BytesTransferred != n {
		h.t.Fatalf("receive completion %+v, want status %#x type %#x code %d bytes %d", e, status, typ, code, n)
	}
	return e
}

// stillValid checks that an invalidation a peer asked for did not happen.
func (h *hostile) stillValid(b *buffer, pd uint32) {
	h.t.Helper()
	if _, f := h.b.regions.CheckRemote(pd, b.tokens.Remote, b.addr(0), 1, memreg.AccessRemoteRead); f != memreg.OK {
		h.t.Fatalf("region's token no longer works: %v", f)
	}
}

func sendCases() []hostileCase {
	flushed := func(h *hostile) {
		h.settle()
		h.recvDone(ndkpi.StatusCancelled, ndkpi.OpReceive, wcWRFlushErr, 0)
	}
	badInvalidate := func(pd uint32, invalidatable bool) func(h *hostile) []answer {
		return func(h *hostile) []answer {
			victim := h.region(64, allRemote, pd, invalidatable)
			r := h.receive(64)
			data := payloadOf(16, 4)
			h.inj.inject(h.send(rocev2.RCSendOnlyInvalidate, e0, data, victim.tokens.Remote))
			h.recvDone(ndkpi.StatusAccessViolation, ndkpi.OpReceiveAndInvalidate, wcRemInvReqErr, 16)
			h.expect(r, 0, data) // placed before the IETH is looked at, as in rxe
			h.stillValid(victim, pd)
			return []answer{nakAt(e0, nakIR)}
		}
	}
	return []hostileCase{
		{name: "send/middle-without-first", fails: true, run: func(h *hostile) []answer {
			h.receive(512)
			h.inj.inject(h.send(rocev2.RCSendMiddle, e0, payloadOf(pmtu, 1), 0))
			flushed(h)
			return []answer{nakAt(e0, nakIR)}
		}},
		{name: "send/last-without-first", fails: true, run: func(h *hostile) []answer {
			h.receive(512)
			h.inj.inject(h.send(rocev2.RCSendLast, e0, payloadOf(16, 1), 0))
			flushed(h)
			return []answer{nakAt(e0, nakIR)}
		}},
		{name: "send/only-over-pmtu", fails: true, run: func(h *hostile) []answer {
			h.receive(1024)
			h.inj.inject(h.send(rocev2.RCSendOnly, e0, payloadOf(2*pmtu, 1), 0))
			flushed(h)
			return []answer{nakAt(e0, nakIR)}
		}},
		{name: "send/larger-than-receive", fails: true, run: func(h *hostile) []answer {
			h.receive(64)
			h.inj.inject(h.send(rocev2.RCSendOnly, e0, payloadOf(128, 1), 0))
			h.recvDone(ndkpi.StatusBufferOverflow, ndkpi.OpReceive, wcLocLenErr, 0)
			return []answer{nakAt(e0, nakIR)}
		}},
		{name: "send/overflows-on-last", fails: true, run: func(h *hostile) []answer {
			r := h.receive(300)
			first := payloadOf(pmtu, 5)
			f := h.hdr(rocev2.RCSendFirst, e0)
			f.BTH.AckReq = false
			h.inj.inject(h.frame(f, first), h.send(rocev2.RCSendLast, e0.Next(), payloadOf(pmtu, 6), 0))
			h.recvDone(ndkpi.StatusBufferOverflow, ndkpi.OpReceive, wcLocLenErr, pmtu)
			h.expect(r, 0, first)
			return []answer{nakAt(e0.Next(), nakIR)}
		}},
		{name: "send/no-receive", live: true, run: func(h *hostile) []answer {
			h.inj.inject(h.send(rocev2.RCSendOnly, e0, payloadOf(16, 1), 0))
			return []answer{{op: rocev2.RCAck, psn: e0, syn: rocev2.RNRNAKSyndrome(rocev2.RNRTimer(1))}}
		}},
		{name: "send-inv/other-pd", fails: true, run: badInvalidate(testPD+2, true)},
		{name: "send-inv/not-invalidatable", fails: true, run: badInvalidate(testPD, false)},
		{name: "send-inv/already-invalidated", fails: true, run: func(h *hostile) []answer {
			victim := h.region(64, allRemote, testPD, true)
			r1, r2 := h.receive(64), h.receive(64)
			d1, d2 := payloadOf(16, 7), payloadOf(16, 8)
			h.inj.inject(h.send(rocev2.RCSendOnlyInvalidate, e0, d1, victim.tokens.Remote),
				h.send(rocev2.RCSendOnlyInvalidate, e0.Next(), d2, victim.tokens.Remote))
			h.recvDone(ndkpi.StatusSuccess, ndkpi.OpReceiveAndInvalidate, 0, 16)
			h.recvDone(ndkpi.StatusAccessViolation, ndkpi.OpReceiveAndInvalidate, wcRemInvReqErr, 16)
			h.expect(r1, 0, d1)
			h.expect(r2, 0, d2)
			return []answer{nakAt(e0.Next(), nakIR)}
		}},
		// send-inv/memory-window: not applicable, memreg has no memory
		// windows yet.
	}
}

func readAtomicCases() []hostileCase {
	readAt := func(va func(h *hostile) uint64, key func(h *hostile) uint32, n uint32) func(h *hostile) []byte {
		return func(h *hostile) []byte { return h.read(e0, va(h), key(h), n) }
	}
	atomicAt := func(op rocev2.Opcode, va func(h *hostile) uint64, key func(h *hostile) uint32) func(h *hostile) []byte {
		return func(h *hostile) []byte { return h.atomicOp(op, e0, va(h), key(h), 0, 5) }
	}
	region := func(n int, access memreg.Access) func(h *hostile) (uint64, uint32) {
		return func(h *hostile) (uint64, uint32) {
			b := h.region(n, access, testPD, false)
			return b.addr(n - 4), b.tokens.Remote
		}
	}
	split := func(r func(h *hostile) (uint64, uint32), f func(va uint64, key uint32, h *hostile) []byte) func(h *hostile) []byte {
		return func(h *hostile) []byte {
			va, key := r(h)
			return f(va, key, h)
		}
	}
	return []hostileCase{
		{name: "read/larger-than-mr", fails: true, run: nakOnly(nakRA, readAt(mrVA(512), mrKey, 1024))},
		{name: "read/no-read-right", fails: true, run: nakOnly(nakRA, split(region(64, memreg.AccessLocalWrite|memreg.AccessRemoteWrite),
			func(va uint64, key uint32, h *hostile) []byte { return h.read(e0, va-60, key, 16) }))},
		{name: "read/va-wraps-2^64", fails: true, run: nakOnly(nakRA, readAt(func(*hostile) uint64 { return ^uint64(3) }, mrKey, 8))},
		{name: "read/dmalen-over-2^31", fails: true, run: nakOnly(nakRA, readAt(mrVA(0), mrKey, 1<<31+1))},
		{name: "read/zero-length-odd-address", live: true, run: func(h *hostile) []answer {
			h.inj.inject(h.read(e0, 3, 0, 0))
			return []answer{readResp(rocev2.RCReadResponseOnly, e0, 0)}
		}},
		{name: "read/beyond-responder-resources", fails: true, opts: hostileOptions{inboundReads: 1}, run: func(h *hostile) []answer {
			h.inj.inject(h.read(e0, h.mr.addr(0), mrKey(h), 1024), h.read(e0.Add(4), h.mr.addr(0), mrKey(h), 64))
			return []answer{
				readResp(rocev2.RCReadResponseFirst, e0, pmtu), readResp(rocev2.RCReadResponseMiddle, e0.Add(1), pmtu),
				readResp(rocev2.RCReadResponseMiddle, e0.Add(2), pmtu), readResp(rocev2.RCReadResponseLast, e0.Add(3), pmtu),
				nakAt(e0.Add(4), nakIR),
			}
		}},
		{name: "read/inside-a-write", fails: true, run: func(h *hostile) []answer {
			first := payloadOf(pmtu, 2)
			f := h.write(rocev2.RCWriteFirst, e0, h.mr.addr(0), mrKey(h), 512, first)
			h.inj.inject(f, h.read(e0.Next(), h.mr.addr(0), mrKey(h), 64))
			h.expect(h.mr, 0, first)
			return []answer{nakAt(e0.Next(), nakIR)}
		}},
		{name: "atomic/misaligned", fails: true, run: nakOnly(nakIR, atomicAt(rocev2.RCFetchAdd, mrVA(4), mrKey))},
		{name: "atomic/no-atomic-right", fails: true, run: nakOnly(nakRA, split(region(64, memreg.AccessLocalWrite|memreg.AccessRemoteRead|memreg.AccessRemoteWrite),
			func(va uint64, key uint32, h *hostile) []byte {
				return h.atomicOp(rocev2.RCFetchAdd, e0, va-60, key, 0, 5)
			}))},
		{name: "atomic/last-4-bytes", fails: true, run: nakOnly(nakRA, atomicAt(rocev2.RCCompareSwap, mrVA(1020), mrKey))},
		{name: "atomic/last-4-aligned", fails: true, run: nakOnly(nakRA, split(region(12, allRemote),
			func(va uint64, key uint32, h *hostile) []byte {
				if va&7 != 0 {
					h.t.Fatalf("the last 4 bytes of the region start at %#x, not 8-aligned", va)
				}
				return h.atomicOp(rocev2.RCFetchAdd, e0, va, key, 0, 5)
			}))},
		{name: "atomic/inside-a-send", fails: true, run: func(h *hostile) []answer {
			r := h.receive(1024)
			first := payloadOf(pmtu, 2)
			f := h.hdr(rocev2.RCSendFirst, e0)
			f.BTH.AckReq = false
			h.inj.inject(h.frame(f, first), h.atomicOp(rocev2.RCFetchAdd, e0.Next(), h.mr.addr(0), mrKey(h), 0, 5))
			h.settle()
			h.recvDone(ndkpi.StatusCancelled, ndkpi.OpReceive, wcWRFlushErr, 0)
			h.expect(r, 0, first)
			return []answer{nakAt(e0.Next(), nakIR)}
		}},
	}
}
