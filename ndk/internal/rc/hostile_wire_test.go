package rc

import (
	"time"

	"github.com/ndkxdp/ndkxdp/ndk/internal/memreg"
	"github.com/ndkxdp/ndkxdp/ndk/internal/ndkpi"
	"github.com/ndkxdp/ndkxdp/rocev2"
)

// The PSN, forged-answer and malformed-frame cases of TestHostilePeer.

func psnCases() []hostileCase {
	dupWrite := func(psn rocev2.PSN) func(h *hostile) []answer {
		return func(h *hostile) []answer {
			h.inj.inject(h.write(rocev2.RCWriteOnly, psn, h.mr.addr(0), mrKey(h), 16, payloadOf(16, 9)))
			return []answer{ackAt(e0.Add(rocev2.PSNMask))}
		}
	}
	// readTwice answers a READ of n bytes, then its duplicate asking for
	// dup bytes after between ran.
	readTwice := func(b func(h *hostile) *buffer, n, dup uint32, between func(h *hostile, b *buffer)) func(h *hostile) {
		return func(h *hostile) {
			r := b(h)
			h.inj.inject(h.read(e0, r.addr(0), r.tokens.Remote, n))
			h.settle()
			if between != nil {
				between(h, r)
			}
			h.inj.inject(h.read(e0, r.addr(0), r.tokens.Remote, dup))
		}
	}
	mr := func(h *hostile) *buffer { return h.mr }
	return []hostileCase{
		{name: "psn/far-future", live: true, counter: func(s Stats) uint64 { return s.OutOfSeq }, run: func(h *hostile) []answer {
			far := e0.Add(1<<23 - 1)
			h.inj.inject(h.write(rocev2.RCWriteOnly, far, h.mr.addr(0), mrKey(h), 16, payloadOf(16, 1)))
			h.settle()
			h.inj.inject(h.write(rocev2.RCWriteOnly, e0.Add(1<<22), h.mr.addr(0), mrKey(h), 16, payloadOf(16, 1)))
			return []answer{nakAt(e0, nakSeq)}
		}},
		{name: "psn/half-way", live: true, counter: duplicates, run: dupWrite(e0.Add(1 << 23))},
		{name: "psn/duplicate-write", live: true, counter: duplicates, run: dupWrite(e0.Add(rocev2.PSNMask))},
		{name: "psn/ancient-duplicate-write", live: true, counter: duplicates, run: dupWrite(e0.Add(1<<23 + 1))},
		{name: "psn/wrap", live: true, run: func(h *hostile) []answer {
			p1, p2 := payloadOf(16, 1), payloadOf(16, 2)
			h.inj.inject(h.write(rocev2.RCWriteOnly, e0, h.mr.addr(0), mrKey(h), 16, p1),
				h.write(rocev2.RCWriteOnly, 0, h.mr.addr(16), mrKey(h), 16, p2))
			h.settle()
			h.inj.inject(h.write(rocev2.RCWriteOnly, e0, h.mr.addr(0), mrKey(h), 16, payloadOf(16, 3)))
			h.expect(h.mr, 0, p1)
			h.expect(h.mr, 16, p2)
			return []answer{ackAt(0), ackAt(0)}
		}},
		{name: "psn/ancient-duplicate-read", live: true, counter: stale, run: func(h *hostile) []answer {
			h.inj.inject(h.read(e0.Add(rocev2.PSNMask-999), h.mr.addr(0), mrKey(h), 64))
			return nil
		}},
		{name: "psn/duplicate-read-longer", live: true, counter: stale, run: func(h *hostile) []answer {
			readTwice(mr, pmtu, 2*pmtu, nil)(h)
			return []answer{readResp(rocev2.RCReadResponseOnly, e0, pmtu)}
		}},
		{name: "psn/duplicate-read-shorter", live: true, counter: duplicates, run: func(h *hostile) []answer {
			readTwice(mr, 2*pmtu, 100, nil)(h)
			return []answer{
				readResp(rocev2.RCReadResponseFirst, e0, pmtu), readResp(rocev2.RCReadResponseLast, e0.Next(), pmtu),
				readResp(rocev2.RCReadResponseOnly, e0, 100),
			}
		}},
		{name: "psn/duplicate-read-invalidated", fails: true, run: func(h *hostile) []answer {
			inv := func(h *hostile) *buffer { return h.region(64, allRemote, testPD, true) }
			readTwice(inv, 64, 64, func(h *hostile, b *buffer) {
				h.receive(16)
				h.inj.inject(h.send(rocev2.RCSendOnlyInvalidate, e0.Next(), nil, b.tokens.Remote))
				h.settle()
				h.recvDone(ndkpi.StatusSuccess, ndkpi.OpReceiveAndInvalidate, 0, 0)
			})(h)
			return []answer{readResp(rocev2.RCReadResponseOnly, e0, 64), ackAt(e0.Next()), nakAt(e0, nakRA)}
		}},
		{name: "psn/duplicate-read-deregistered", fails: true, run: func(h *hostile) []answer {
			reg := func(h *hostile) *buffer { return h.region(64, allRemote, testPD, false) }
			readTwice(reg, 64, 64, func(h *hostile, b *buffer) {
				if err := h.b.regions.Deregister(b.tokens.Local); err != nil {
					h.t.Fatal(err)
				}
			})(h)
			return []answer{readResp(rocev2.RCReadResponseOnly, e0, 64), nakAt(e0, nakRA)}
		}},
		{name: "dup/read-same-key", live: true, counter: duplicates, run: func(h *hostile) []answer {
			readTwice(mr, 64, 64, nil)(h)
			return []answer{readResp(rocev2.RCReadResponseOnly, e0, 64), readResp(rocev2.RCReadResponseOnly, e0, 64)}
		}},
		{name: "dup/read-wrong-key", fails: true, counter: accessViolations, run: func(h *hostile) []answer {
			h.inj.inject(h.read(e0, h.mr.addr(0), mrKey(h), 64))
			h.settle()
			h.inj.inject(h.read(e0, h.mr.addr(0), mrKey(h)^0x55, 64))
			return []answer{readResp(rocev2.RCReadResponseOnly, e0, 64), nakAt(e0, nakRA)}
		}},
		{name: "dup/read-other-regions-key", fails: true, counter: accessViolations, run: func(h *hostile) []answer {
			// A valid key, but not the one the READ was granted with.
			other := h.region(64, allRemote, testPD, false)
			h.inj.inject(h.read(e0, h.mr.addr(0), mrKey(h), 64))
			h.settle()
			h.inj.inject(h.read(e0, h.mr.addr(0), other.tokens.Remote, 64))
			return []answer{readResp(rocev2.RCReadResponseOnly, e0, 64), nakAt(e0, nakRA)}
		}},
		{name: "dup/read-second-packet-deregistered", fails: true, run: func(h *hostile) []answer {
			reg := h.region(2*pmtu, allRemote, testPD, false)
			h.inj.inject(h.read(e0, reg.addr(0), reg.tokens.Remote, 2*pmtu))
			h.settle()
			if err := h.b.regions.Deregister(reg.tokens.Local); err != nil {
				h.t.Fatal(err)
			}
			h.inj.inject(h.read(e0.Next(), reg.addr(pmtu), reg.tokens.Remote, pmtu))
			return []answer{readResp(rocev2.RCReadResponseFirst, e0, pmtu), readResp(rocev2.RCReadResponseLast, e0.Next(), pmtu), nakAt(e0.Next(), nakRA)}
		}},
		{name: "dup/atomic-wrong-key", fails: true, counter: accessViolations, run: func(h *hostile) []answer {
			orig := u64(h.mr.b[:8])
			h.inj.inject(h.atomicOp(rocev2.RCFetchAdd, e0, h.mr.addr(0), mrKey(h), 0, 5))
			h.settle()
			h.inj.inject(h.atomicOp(rocev2.RCFetchAdd, e0, h.mr.addr(0), mrKey(h)^0x55, 0, 5))
			var want [8]byte
			putU64(want[:], orig+5)
			h.expect(h.mr, 0, want[:])
			return []answer{{op: rocev2.RCAtomicAck, psn: e0, syn: okSyn, orig: orig}, nakAt(e0, nakRA)}
		}},
		{name: "dup/atomic-deregistered", fails: true, run: func(h *hostile) []answer {
			reg := h.region(8, allRemote, testPD, false)
			orig := u64(reg.b[:8])
			h.inj.inject(h.atomicOp(rocev2.RCFetchAdd, e0, reg.addr(0), reg.tokens.Remote, 0, 5))
			h.settle()
			if err := h.b.regions.Deregister(reg.tokens.Local); err != nil {
				h.t.Fatal(err)
			}
			h.inj.inject(h.atomicOp(rocev2.RCFetchAdd, e0, reg.addr(0), reg.tokens.Remote, 0, 5))
			var want [8]byte
			putU64(want[:], orig+5)
			h.expect(reg, 0, want[:])
			return []answer{{op: rocev2.RCAtomicAck, psn: e0, syn: okSyn, orig: orig}, nakAt(e0, nakRA)}
		}},
		{name: "dup/atomic-other-address", live: true, counter: stale, run: func(h *hostile) []answer {
			orig := u64(h.mr.b[:8])
			h.inj.inject(h.atomicOp(rocev2.RCFetchAdd, e0, h.mr.addr(0), mrKey(h), 0, 5))
			h.settle()
			h.inj.inject(h.atomicOp(rocev2.RCFetchAdd, e0, h.mr.addr(8), mrKey(h), 0, 5))
			var want [8]byte
			putU64(want[:], orig+5)
			h.expect(h.mr, 0, want[:])
			return []answer{{op: rocev2.RCAtomicAck, psn: e0, syn: okSyn, orig: orig}}
		}},
		{name: "dup/write-wrong-key", live: true, counter: stale, run: func(h *hostile) []answer {
			h.inj.inject(h.write(rocev2.RCWriteOnly, e0.Add(rocev2.PSNMask), h.mr.addr(0), mrKey(h)^0x55, 16, payloadOf(16, 9)))
			return nil // dropped: no ACK tells the forger the key works
		}},
		{name: "dup/write-no-write-right", live: true, counter: stale, run: func(h *hostile) []answer {
			ro := h.region(64, memreg.AccessRemoteRead, testPD, false)
			h.inj.inject(h.write(rocev2.RCWriteFirst, e0.Add(rocev2.PSNMask), ro.addr(0), ro.tokens.Remote, 2*pmtu, payloadOf(pmtu, 9)))
			return nil
		}},
		{name: "dup/write-valid-key", live: true, counter: duplicates, run: func(h *hostile) []answer {
			// The control: the same duplicate with the region's own key
			// is acknowledged again (and not executed).
			h.inj.inject(h.write(rocev2.RCWriteOnly, e0.Add(rocev2.PSNMask), h.mr.addr(0), mrKey(h), 16, payloadOf(16, 9)))
			return []answer{ackAt(e0.Add(rocev2.PSNMask))}
		}},
		{name: "dup/write-zero-length-any-key", live: true, counter: duplicates, run: func(h *hostile) []answer {
			// C9-88: a zero-length WRITE names no memory, so no key.
			h.inj.inject(h.write(rocev2.RCWriteOnly, e0.Add(rocev2.PSNMask), 1, 0, 0, nil))
			return []answer{ackAt(e0.Add(rocev2.PSNMask))}
		}},
		{name: "psn/duplicate-atomic", live: true, counter: func(s Stats) uint64 { return s.AtomicReplays }, run: func(h *hostile) []answer {
			orig := u64(h.mr.b[:8])
			h.inj.inject(h.atomicOp(rocev2.RCFetchAdd, e0, h.mr.addr(0), mrKey(h), 0, 5))
			h.settle()
			h.inj.inject(h.atomicOp(rocev2.RCFetchAdd, e0, h.mr.addr(0), mrKey(h), 0, 100))
			var want [8]byte
			putU64(want[:], orig+5)
			h.expect(h.mr, 0, want[:])
			ack := answer{op: rocev2.RCAtomicAck, psn: e0, syn: okSyn, orig: orig}
			return []answer{ack, ack}
		}},
	}
}

// outstanding has B post a WRITE (or, with read, a READ of 64 bytes into
// a fenced sink) to A while B's requests are lost, so that it stays
// outstanding; release lets the retransmission through and waits for the
// request to complete with want.
type outstanding struct {
	h    *hostile
	psn  rocev2.PSN // the request's PSN
	sink *buffer
	data []byte
}

func (h *hostile) outstanding(read bool) *outstanding {
	h.t.Helper()
	o := &outstanding{h: h, psn: h.nextPSN(), data: payloadOf(64, 11)}
	h.rec.hold.Store(true)
	if read {
		src := h.a.buffer(64, memreg.AccessRemoteRead, false)
		copy(src.b, o.data)
		h.a.eng.Stats() // orders the bytes before A's engine reads them
		o.sink = h.region(64, memreg.AccessLocalWrite, testPD, false)
		mustPost(h.t, h.qb.PostSend(&SendWR{Op: OpRead, Context: "out", SGL: []SGE{o.sink.sge(0, 64)},
			RemoteAddr: src.addr(0), RemoteToken: src.tokens.Remote}))
	} else {
		src := h.region(64, 0, testPD, false)
		dst := h.a.buffer(64, memreg.AccessRemoteWrite|memreg.AccessLocalWrite, false)
		mustPost(h.t, h.qb.PostSend(&SendWR{Op: OpWrite, Context: "out", SGL: []SGE{src.sge(0, 64)},
			RemoteAddr: dst.addr(0), RemoteToken: dst.tokens.Remote}))
	}
	h.settle()
	if n := h.nextPSN(); n != o.psn.Next() {
		h.t.Fatalf("B's next PSN %#x after posting, want %#x", n, o.psn.Next())
	}
	return o
}

// release lets B's retransmission reach A and checks the request then
// completes successfully: the forged answer changed nothing.
func (o *outstanding) release() {
	h := o.h
	h.t.Helper()
	expectNone(h.t, h.b.scq, time.Millisecond)
	h.rec.hold.Store(false)
	e := waitCQ(h.t, h.b.scq, 1, 5*time.Second)[0]
	if e.Status != ndkpi.StatusSuccess || e.RequestContext != "out" {
		h.t.Fatalf("the outstanding request completed %+v after the forgery", e)
	}
	if o.sink != nil {
		h.b.eng.Stats()
		h.expect(o.sink, 0, o.data)
	}
}

// forged injects one answer to B's outstanding request: it must be
// dropped and change nothing.
func forged(read bool, f func(h *hostile, o *outstanding) []byte) func(h *hostile) []answer {
	return func(h *hostile) []answer {
		o := h.outstanding(read)
		h.inj.inject(f(h, o))
		h.settle()
		o.release()
		return nil
	}
}

// fatalAnswer injects an answer that must fail B's outstanding request
// with status and code and put B's QP in error.
func fatalAnswer(read bool, status ndkpi.Status, code uint32, f func(h *hostile, o *outstanding) []byte) func(h *hostile) []answer {
	return func(h *hostile) []answer {
		o := h.outstanding(read)
		h.inj.inject(f(h, o))
		e := waitCQ(h.t, h.b.scq, 1, 5*time.Second)[0]
		if e.Status != status || e.ProviderErrorCode != code {
			h.t.Fatalf("completion %+v, want status %#x code %d", e, status, code)
		}
		return nil
	}
}

// outstandingAtomic has B post a FETCH_ADD to A while B's requests are
// lost, and returns its PSN and the sink its original value lands in.
func (h *hostile) outstandingAtomic() (rocev2.PSN, *buffer) {
	h.t.Helper()
	psn := h.nextPSN()
	h.rec.hold.Store(true)
	word := h.a.buffer(8, memreg.AccessRemoteAtomic|memreg.AccessLocalWrite, false)
	sink := h.region(8, memreg.AccessLocalWrite, testPD, false)
	mustPost(h.t, h.qb.PostSend(&SendWR{Op: OpFetchAdd, Context: "out", SGL: []SGE{sink.sge(0, 8)},
		RemoteAddr: word.addr(0), RemoteToken: word.tokens.Remote, SwapAdd: 1}))
	h.settle()
	return psn, sink
}

// wantBadResponse waits for B's outstanding request to fail with a bad
// response.
func (h *hostile) wantBadResponse() []answer {
	h.t.Helper()
	e := waitCQ(h.t, h.b.scq, 1, 5*time.Second)[0]
	if e.Status != ndkpi.StatusRemoteResources || e.ProviderErrorCode != wcBadRespErr {
		h.t.Fatalf("completion %+v, want status %#x code %d", e, ndkpi.StatusRemoteResources, wcBadRespErr)
	}
	return nil
}

// badAnswer injects an answer whose AETH syndrome IBTA reserves for its
// opcode: the outstanding request fails at once with a bad response.
func badAnswer(read bool, f func(h *hostile, o *outstanding) []byte) func(h *hostile) []answer {
	return fatalAnswer(read, ndkpi.StatusRemoteResources, wcBadRespErr, f)
}

func badSyn(s Stats) uint64 { return s.BadSyndromes }

func forgedCases() []hostileCase {
	ack := func(op rocev2.Opcode, dpsn uint32, syn rocev2.Syndrome, n int) func(h *hostile, o *outstanding) []byte {
		return func(h *hostile, o *outstanding) []byte {
			return h.answerFrame(op, o.psn.Add(dpsn), syn, payloadOf(n, 12))
		}
	}
	return []hostileCase{
		{name: "forged/ack-never-sent", counter: stale, run: forged(false, ack(rocev2.RCAck, 10, okSyn, 0))},
		{name: "forged/ack-nothing-outstanding", counter: stale, live: true, run: func(h *hostile) []answer {
			h.inj.inject(h.answerFrame(rocev2.RCAck, h.nextPSN(), okSyn, nil))
			return nil
		}},
		{name: "forged/nak-never-sent", counter: stale, run: forged(false, ack(rocev2.RCAck, 5, rocev2.NAKSyndrome(nakRA), 0))},
		{name: "forged/seq-nak-never-sent", counter: stale, run: forged(false, ack(rocev2.RCAck, 5, rocev2.NAKSyndrome(nakSeq), 0))},
		{name: "forged/rnr-never-sent", counter: stale, run: forged(false, ack(rocev2.RCAck, 5, rocev2.RNRNAKSyndrome(rocev2.RNRTimer(20)), 0))},
		{name: "forged/read-response-never-sent", counter: stale, run: forged(true, ack(rocev2.RCReadResponseOnly, 3, okSyn, 64))},
		{name: "forged/read-response-for-write", counter: stale, run: forged(false, ack(rocev2.RCReadResponseOnly, 0, okSyn, 64))},
		{name: "forged/atomic-ack-never-sent", counter: stale, run: forged(false, func(h *hostile, o *outstanding) []byte {
			hd := h.hdr(rocev2.RCAtomicAck, o.psn.Add(2))
			hd.AETH = rocev2.AETHFields{Syndrome: okSyn}
			hd.AtomicAckETH.OrigData = 42
			return h.frame(hd, nil)
		})},
		{name: "forged/read-response-too-long", fails: true, run: fatalAnswer(true, ndkpi.StatusDataOverrun, wcLocLenErr, ack(rocev2.RCReadResponseOnly, 0, okSyn, 100))},
		{name: "aeth/reserved-type", fails: true, counter: badSyn, run: badAnswer(false, ack(rocev2.RCAck, 0, rocev2.Syndrome(0x40|0x1F), 0))},
		{name: "aeth/reserved-type-zero", fails: true, counter: badSyn, run: badAnswer(false, ack(rocev2.RCAck, 0, rocev2.Syndrome(0x40), 0))},
		{name: "aeth/bit-7", fails: true, counter: badSyn, run: badAnswer(false, ack(rocev2.RCAck, 0, rocev2.Syndrome(0x80)|okSyn, 0))},
		{name: "aeth/read-response-nak", fails: true, counter: badSyn, run: badAnswer(true, ack(rocev2.RCReadResponseOnly, 0, rocev2.NAKSyndrome(nakRA), 64))},
		{name: "aeth/read-response-rnr", fails: true, counter: badSyn, run: badAnswer(true, ack(rocev2.RCReadResponseOnly, 0, rocev2.RNRNAKSyndrome(1), 64))},
		{name: "aeth/read-response-reserved", fails: true, counter: badSyn, run: badAnswer(true, ack(rocev2.RCReadResponseOnly, 0, rocev2.Syndrome(0x5F), 64))},
		{name: "aeth/atomic-ack-nak", fails: true, counter: badSyn, run: func(h *hostile) []answer {
			psn, _ := h.outstandingAtomic()
			h.inj.inject(h.answerFrame(rocev2.RCAtomicAck, psn, rocev2.NAKSyndrome(nakRA), nil))
			return h.wantBadResponse()
		}},
		{name: "aeth/atomic-ack-reserved", fails: true, counter: badSyn, run: func(h *hostile) []answer {
			psn, _ := h.outstandingAtomic()
			h.inj.inject(h.answerFrame(rocev2.RCAtomicAck, psn, rocev2.Syndrome(0x41), nil))
			return h.wantBadResponse()
		}},
		{name: "aeth/atomic-ack-with-credits", run: func(h *hostile) []answer {
			psn, sink := h.outstandingAtomic()
			h.inj.inject(h.answerFrame(rocev2.RCAtomicAck, psn, rocev2.ACKSyndrome(7), nil))
			e := waitCQ(h.t, h.b.scq, 1, 5*time.Second)[0]
			h.rec.hold.Store(false)
			if e.Status != ndkpi.StatusSuccess {
				h.t.Fatalf("completion %+v after an ATOMIC_ACKNOWLEDGE with credit code 7", e)
			}
			h.b.eng.Stats()
			h.expect(sink, 0, make([]byte, 8)) // the forged original value, 0
			return nil
		}},
		{name: "aeth/ack-with-credits", run: func(h *hostile) []answer {
			// The control of the reserved cases: the same ACK with a
			// defined syndrome (a credit count) retires the request.
			o := h.outstanding(false)
			h.inj.inject(h.answerFrame(rocev2.RCAck, o.psn, rocev2.ACKSyndrome(5), nil))
			e := waitCQ(h.t, h.b.scq, 1, 5*time.Second)[0]
			h.rec.hold.Store(false)
			if e.Status != ndkpi.StatusSuccess {
				h.t.Fatalf("completion %+v after an ACK with credit code 5", e)
			}
			return nil
		}},
		{name: "aeth/read-response-with-credits", run: func(h *hostile) []answer {
			o := h.outstanding(true)
			h.inj.inject(h.answerFrame(rocev2.RCReadResponseOnly, o.psn, rocev2.ACKSyndrome(3), o.data))
			e := waitCQ(h.t, h.b.scq, 1, 5*time.Second)[0]
			h.rec.hold.Store(false)
			if e.Status != ndkpi.StatusSuccess {
				h.t.Fatalf("completion %+v after a READ response with credit code 3", e)
			}
			h.b.eng.Stats()
			h.expect(o.sink, 0, o.data)
			return nil
		}},
		{name: "aeth/reserved-nak-code", fails: true, run: fatalAnswer(false, ndkpi.StatusRemoteResources, wcRemOpErr, ack(rocev2.RCAck, 0, rocev2.NAKSyndrome(7), 0))},
		{name: "aeth/remote-operational", fails: true, run: fatalAnswer(false, ndkpi.StatusRemoteResources, wcRemOpErr, ack(rocev2.RCAck, 0, rocev2.NAKSyndrome(rocev2.NAKRemoteOperationalError), 0))},
	}
}

func malformedCases() []hostileCase {
	// edit builds a frame, lets f change its bytes, and fixes the ICRC.
	edit := func(build func(h *hostile) []byte, f func(b []byte) []byte) func(h *hostile) []answer {
		return func(h *hostile) []answer {
			b := f(build(h))
			reICRC(h.t, b)
			h.inj.inject(b)
			return nil
		}
	}
	sendOnly := func(n int) func(h *hostile) []byte {
		return func(h *hostile) []byte { return h.send(rocev2.RCSendOnly, e0, payloadOf(n, 1), 0) }
	}
	opcode := func(op rocev2.Opcode) func(b []byte) []byte {
		return func(b []byte) []byte { b[bthAt] = byte(op); return b }
	}
	pad := func(n byte) func(b []byte) []byte {
		return func(b []byte) []byte { b[bthAt+1] = b[bthAt+1]&^0x30 | n<<4; return b }
	}
	return []hostileCase{
		{name: "malformed/pad-beyond-payload", live: true, counter: malformed, run: edit(func(h *hostile) []byte {
			return h.write(rocev2.RCWriteOnly, e0, h.mr.addr(0), mrKey(h), 0, nil)
		}, pad(3))},
		{name: "malformed/pad-disagrees", fails: true, run: func(h *hostile) []answer {
			b := pad(2)(h.write(rocev2.RCWriteOnly, e0, h.mr.addr(0), mrKey(h), 16, payloadOf(16, 1)))
			reICRC(h.t, b)
			h.inj.inject(b)
			return []answer{nakAt(e0, nakIR)}
		}},
		{name: "malformed/pad-on-ack", live: true, counter: malformed, run: edit(func(h *hostile) []byte {
			return h.answerFrame(rocev2.RCAck, h.nextPSN(), okSyn, nil)
		}, pad(1))},
		{name: "malformed/truncated-reth", live: true, counter: malformed, run: edit(sendOnly(8), opcode(rocev2.RCWriteOnly))},
		{name: "malformed/truncated-atomiceth", live: true, counter: malformed, run: edit(sendOnly(16), opcode(rocev2.RCFetchAdd))},
		{name: "malformed/truncated-aeth", live: true, counter: malformed, run: edit(sendOnly(0), opcode(rocev2.RCAck))},
		{name: "malformed/read-with-payload", live: true, counter: malformed, run: edit(func(h *hostile) []byte {
			return h.write(rocev2.RCWriteOnly, e0, h.mr.addr(0), mrKey(h), 8, payloadOf(8, 1))
		}, opcode(rocev2.RCReadRequest))},
		{name: "malformed/wrong-pkey", live: true, counter: func(s Stats) uint64 { return s.BadPKey }, run: func(h *hostile) []answer {
			hd := h.hdr(rocev2.RCWriteOnly, e0)
			hd.BTH.PKey = 0x8123
			hd.RETH = rocev2.RETHFields{VA: h.mr.addr(0), RKey: mrKey(h), DMALen: 16}
			h.inj.inject(h.frame(hd, payloadOf(16, 1)))
			return nil
		}},
		{name: "malformed/bad-icrc", live: true, counter: func(s Stats) uint64 { return s.BadICRC }, run: func(h *hostile) []answer {
			b := h.write(rocev2.RCWriteOnly, e0, h.mr.addr(0), mrKey(h), 16, payloadOf(16, 1))
			b[len(b)-1] ^= 1
			h.inj.inject(b)
			return nil
		}},
	}
}
