package congestion

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/ndkxdp/ndkxdp/internal/testenv"
)

// marker is the bottleneck's AQM, a switch port as HULL builds it
// (Alizadeh et al., "Less is More: Trading a little Bandwidth for
// Ultra-Low Latency in the Data Center", NSDI 2012, section 4.1): a
// phantom queue, a counter that every frame joins and that drains at
// γ times the port's rate, signals ECN-capable senders by the RED law
// DCQCN's switches run (marking probability 0 up to Kmin bytes of the
// phantom queue, Pmax at Kmax, 1 beyond; CE on ECT(0) and ECT(1)
// frames), so they slow down before the real queue, draining at the
// full rate, builds. Frames that are not ECN-capable take no part in the
// phantom's marking: they meet RED over the real queue, which drops them
// (as a RED switch with ecn does what it would otherwise mark), as the
// bed's AQM did before it had a phantom queue. The kernels this runs on
// may lack sch_red, sch_fq_codel and every other marking qdisc
// (CONFIG_NET_SCH_RED is not set in the 6.18 kernel these tests ran on),
// so it is a tc program on the port's egress, ahead of the htb class
// that shapes it, built here instruction by instruction (no compiler
// needed). Arrivals and rate are the htb's, so the real queue it counts
// is the htb's own but for what that queue drops full.
type marker struct {
	state *ebpf.Map
	prog  *ebpf.Program
	link  link.Link
}

// markerState is the map's one value: the real and the phantom queue in
// bytes, when they were last drained (ns), and the frames marked and
// dropped.
const (
	offQueue   = 0
	offLast    = 8
	offMarked  = 16
	offDropped = 24
	offPhantom = 32
	stateSize  = 40
)

// red is one RED law: probability 0 up to Min bytes of queue, MaxP at
// Max, 1 beyond.
type red struct {
	Min, Max int
	MaxP     float64
}

func (r red) validate(what string) error {
	if r.Min < 0 || r.Max <= r.Min || r.Max >= 1<<31 || r.MaxP <= 0 || r.MaxP > 1 {
		return fmt.Errorf("%s RED: want 0 <= min < max < 2 GB and 0 < maxp <= 1, have %d, %d, %v", what, r.Min, r.Max, r.MaxP)
	}
	return nil
}

// newMarker loads the marker (loadMarker) and attaches it to the egress
// of ifindex in the calling thread's namespace.
func newMarker(ifindex int, rateBytes, phantomBytes int, ecn, drop red) (*marker, error) {
	m, err := loadMarker(rateBytes, phantomBytes, ecn, drop)
	if err != nil {
		return nil, err
	}
	m.link, err = link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: m.prog, Attach: ebpf.AttachTCXEgress})
	if err != nil {
		m.close()
		return nil, fmt.Errorf("attach the marker to ifindex %d's egress: %w", ifindex, err)
	}
	return m, nil
}

// loadMarker loads the program for a port of rateBytes a second whose
// phantom queue drains at phantomBytes a second, ECN-capable frames
// marked by ecn over the phantom queue and the others dropped by drop
// over the real one.
func loadMarker(rateBytes, phantomBytes int, ecn, drop red) (*marker, error) {
	if err := ecn.validate("marking"); err != nil {
		return nil, err
	}
	if err := drop.validate("dropping"); err != nil {
		return nil, err
	}
	if rateBytes <= 0 || phantomBytes <= 0 || rateBytes >= 1<<31 || phantomBytes > rateBytes {
		return nil, fmt.Errorf("marker rates: want 0 < phantom %d <= port %d bytes/s < 2 GB/s", phantomBytes, rateBytes)
	}
	m := &marker{}
	var err error
	m.state, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: stateSize, MaxEntries: 1})
	if err != nil {
		return nil, fmt.Errorf("marker state map: %w", err)
	}
	const (
		skb, val, now, q = asm.R6, asm.R7, asm.R8, asm.R9
		tcOK, tcShot     = 0, 2
		ethPIPBE         = 0x0008 // htons(ETH_P_IP), as __sk_buff.protocol holds it
		dtSlot, tosSlot  = -16, -8
	)
	// drainJoin drains the queue at off by dt (at dtSlot) at rate and adds
	// the frame; it leaves the queue in q.
	drainJoin := func(off int16, rate int, l string) asm.Instructions {
		return asm.Instructions{
			asm.LoadMem(asm.R2, asm.RFP, dtSlot, asm.DWord),
			asm.Mul.Imm(asm.R2, int32(rate)),
			asm.Div.Imm(asm.R2, 1e9),
			asm.LoadMem(q, val, off, asm.DWord),
			asm.JGT.Reg(q, asm.R2, l+"drain"),
			asm.Mov.Imm(q, 0),
			asm.Ja.Label(l + "arrive"),
			asm.Sub.Reg(q, asm.R2).WithSymbol(l + "drain"),
			asm.LoadMem(asm.R1, skb, 0, asm.Word).WithSymbol(l + "arrive"), // __sk_buff.len
			asm.Add.Reg(q, asm.R1),
			asm.StoreMem(val, off, q, asm.DWord),
		}
	}
	// law jumps to hit with RED's probability for the queue in q, to
	// "pass" otherwise.
	law := func(r red, hit, miss string) asm.Instructions {
		return asm.Instructions{
			asm.JLE.Imm(q, int32(r.Min), miss),
			asm.JGT.Imm(q, int32(r.Max), hit),
			asm.Mov.Reg(now, q),
			asm.Sub.Imm(now, int32(r.Min)),
			asm.Mul.Imm(now, int32(r.MaxP*65536)),
			asm.Div.Imm(now, int32(r.Max-r.Min)),
			asm.FnGetPrandomU32.Call(),
			asm.And.Imm(asm.R0, 0xffff),
			asm.JGE.Reg(asm.R0, now, miss),
			asm.Ja.Label(hit),
		}
	}
	insns := asm.Instructions{
		asm.Mov.Reg(skb, asm.R1),
		// IPv4 only: the bed's RoCE frames.
		asm.LoadMem(asm.R2, skb, 16, asm.Word), // __sk_buff.protocol
		asm.JNE.Imm(asm.R2, ethPIPBE, "pass"),
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, m.state.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.Mov.Reg(val, asm.R0),
		asm.FnKtimeGetNs.Call(),
		asm.Mov.Reg(now, asm.R0),
		// dt = min(now-last, 1s): both queues drain by dt at their rates.
		asm.LoadMem(asm.R1, val, offLast, asm.DWord),
		asm.StoreMem(val, offLast, now, asm.DWord),
		asm.Mov.Reg(asm.R2, now),
		asm.Sub.Reg(asm.R2, asm.R1),
		asm.JLE.Imm(asm.R2, 1e9, "capped"),
		asm.Mov.Imm(asm.R2, 1e9),
		asm.StoreMem(asm.RFP, dtSlot, asm.R2, asm.DWord).WithSymbol("capped"),
	}
	insns = append(insns, drainJoin(offPhantom, phantomBytes, "phantom.")...)
	insns = append(insns, drainJoin(offQueue, rateBytes, "real.")...)
	insns = append(insns,
		// ECN-capable? The IPv4 TOS byte after 14 of Ethernet.
		asm.StoreImm(asm.RFP, tosSlot, 0, asm.Word),
		asm.Mov.Reg(asm.R1, skb),
		asm.Mov.Imm(asm.R2, 15),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, tosSlot),
		asm.Mov.Imm(asm.R4, 1),
		asm.FnSkbLoadBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R1, asm.RFP, tosSlot, asm.Byte),
		asm.And.Imm(asm.R1, 3),
		asm.JEq.Imm(asm.R1, 0, "notect"),
		// ECN-capable: RED over the phantom queue marks.
		asm.LoadMem(q, val, offPhantom, asm.DWord),
	)
	insns = append(insns, law(ecn, "mark", "pass")...)
	insns = append(insns,
		asm.Mov.Reg(asm.R1, skb).WithSymbol("mark"),
		asm.FnSkbEcnSetCe.Call(),
		asm.Mov.Reg(asm.R2, val),
		asm.Add.Imm(asm.R2, offMarked),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R2, asm.R1, asm.DWord),
		asm.Ja.Label("pass"),
		// Not ECN-capable: RED over the real queue drops.
		asm.LoadMem(q, val, offQueue, asm.DWord).WithSymbol("notect"),
	)
	insns = append(insns, law(drop, "drop", "pass")...)
	insns = append(insns,
		// A dropped frame joins neither queue.
		asm.LoadMem(asm.R1, skb, 0, asm.Word).WithSymbol("drop"),
		asm.LoadMem(q, val, offQueue, asm.DWord),
		asm.Sub.Reg(q, asm.R1),
		asm.StoreMem(val, offQueue, q, asm.DWord),
		asm.LoadMem(q, val, offPhantom, asm.DWord),
		asm.Sub.Reg(q, asm.R1),
		asm.StoreMem(val, offPhantom, q, asm.DWord),
		asm.Mov.Reg(asm.R2, val),
		asm.Add.Imm(asm.R2, offDropped),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R2, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, tcShot),
		asm.Return(),
		asm.Mov.Imm(asm.R0, tcOK).WithSymbol("pass"),
		asm.Return(),
	)
	m.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "GPL", Instructions: insns})
	if err != nil {
		m.close()
		return nil, fmt.Errorf("load the marker: %w", err)
	}
	return m, nil
}

// counts returns the frames marked and dropped so far.
func (m *marker) counts() (marked, dropped uint64, err error) {
	v := make([]byte, stateSize)
	if err := m.state.Lookup(uint32(0), &v); err != nil {
		return 0, 0, fmt.Errorf("read the marker's counts: %w", err)
	}
	return binary.NativeEndian.Uint64(v[offMarked:]), binary.NativeEndian.Uint64(v[offDropped:]), nil
}

// realQueue is the real queue's length now, in bytes: what the program
// last counted, less what the port drained since at rateBytes a second.
func (m *marker) realQueue(rateBytes int) (int64, error) {
	v := make([]byte, stateSize)
	if err := m.state.Lookup(uint32(0), &v); err != nil {
		return 0, fmt.Errorf("read the marker's queue: %w", err)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil { // bpf_ktime_get_ns's clock
		return 0, err
	}
	since := ts.Nano() - int64(binary.NativeEndian.Uint64(v[offLast:]))
	q := int64(binary.NativeEndian.Uint64(v[offQueue:])) - since*int64(rateBytes)/1e9
	return max(q, 0), nil
}

func (m *marker) close() {
	if m.link != nil {
		m.link.Close()
	}
	if m.prog != nil {
		m.prog.Close()
	}
	if m.state != nil {
		m.state.Close()
	}
}

// TestMarker_PhantomMarksBeforeTheRealQueue checks the marking law on
// frames run through the program (BPF_PROG_RUN), with the queues
// draining at a few bytes a second so that only arrivals count:
// ECN-capable frames are marked CE by RED over the phantom queue (none
// below its Kmin, every one beyond its Kmax) while the real queue is far
// below where frames that are not ECN-capable are dropped; those pass
// until the real queue passes the drop law's Kmax and are dropped
// beyond it, never marked.
func TestMarker_PhantomMarksBeforeTheRealQueue(t *testing.T) {
	testenv.RequireRoot(t)
	bn := defaultBottleneck
	const frame = 3000 // BPF_PROG_RUN takes a page less its head- and tailroom
	run := func(t *testing.T, m *marker, ecn byte) (ret uint32, ce bool) {
		t.Helper()
		in := ipv4Frame(frame, ecn)
		out := make([]byte, len(in)+256)
		ret, err := m.prog.Run(&ebpf.RunOptions{Data: in, DataOut: out})
		if err != nil {
			t.Fatal(err)
		}
		return ret, out[15]&3 == 3
	}
	load := func(t *testing.T) *marker {
		t.Helper()
		m, err := loadMarker(2, 1, bn.Mark, bn.Drop)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.close)
		return m
	}
	t.Run("ect", func(t *testing.T) {
		m := load(t)
		for i := 1; i*frame <= bn.Drop.Min; i++ {
			ret, ce := run(t, m, 2) // ECT(0)
			switch q := i * frame; {
			case ret != 0:
				t.Fatalf("ECT(0) frame %d (queue %d bytes): verdict %d, want TC_ACT_OK", i, q, ret)
			case q <= bn.Mark.Min && ce:
				t.Fatalf("frame %d marked CE at %d bytes of phantom queue, under Kmin %d", i, q, bn.Mark.Min)
			case q > bn.Mark.Max && !ce:
				t.Fatalf("frame %d not marked at %d bytes of phantom queue, over Kmax %d", i, q, bn.Mark.Max)
			}
		}
		if marked, dropped, err := m.counts(); err != nil || marked == 0 || dropped != 0 {
			t.Fatalf("counts: %d marked, %d dropped (%v); want some marked, none dropped", marked, dropped, err)
		}
	})
	t.Run("not-ect", func(t *testing.T) {
		m := load(t)
		q, full := 0, 0 // the real queue, and the frames that found it past Kmax
		for range 2 * bn.Drop.Max / frame {
			ret, ce := run(t, m, 0)
			switch {
			case ce:
				t.Fatalf("a frame that is not ECN-capable came out CE")
			case q+frame <= bn.Drop.Min && ret != 0:
				t.Fatalf("frame dropped at %d bytes of real queue, under Kmin %d", q+frame, bn.Drop.Min)
			case q+frame > bn.Drop.Max && ret != 2:
				t.Fatalf("frame passed at %d bytes of real queue, over Kmax %d", q+frame, bn.Drop.Max)
			}
			if q+frame > bn.Drop.Max {
				full++
			}
			if ret == 0 {
				q += frame
			}
		}
		if full == 0 {
			t.Fatalf("the real queue never passed Kmax (%d bytes at the end)", q)
		}
		marked, dropped, err := m.counts()
		if err != nil || marked != 0 || dropped == 0 {
			t.Fatalf("counts: %d marked, %d dropped (%v); want none marked, some dropped", marked, dropped, err)
		}
	})
}

// ipv4Frame is an Ethernet frame of n bytes carrying IPv4 with the ECN
// codepoint ecn and a valid header checksum.
func ipv4Frame(n int, ecn byte) []byte {
	f := make([]byte, n)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:34]
	ip[0], ip[1] = 0x45, ecn
	binary.BigEndian.PutUint16(ip[2:], uint16(n-14))
	ip[8], ip[9] = 64, 17
	copy(ip[12:], []byte{198, 18, 0, 2, 198, 18, 0, 1})
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	return f
}
